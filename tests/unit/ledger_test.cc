// The ETTR ledger as specifications: scripted timelines on a virtual clock,
// with exact expected splits.
#include <gtest/gtest.h>

#include <chrono>

#include "controller/ledger.h"

namespace bulwark::controller {
namespace {

Time S(int64_t seconds) { return TimeFromMs(seconds * 1000); }
Duration Secs(int64_t seconds) { return Duration(seconds * 1000); }

// Completes steps first..last, the first at `at`, then one every 10 s;
// returns the time of the last.
Time Steps(Ledger& l, int64_t first, int64_t last, Time at) {
  for (int64_t k = first; k <= last; ++k, at += Secs(10)) l.StepCompleted(k, at);
  return at - Secs(10);
}

// Start at 0; 60 s of startup to step 1; steps every 10 s to step 100 at
// 1050 s. The fault strikes at 1055, the controller hears at 1065, decides
// at 1070. The job resumes from the checkpoint of step 90: step 91 at 1130
// ends recovery, 92..100 redo lost work, 101..110 are new (110 at 1320).
Ledger ScriptedTimeline(Duration window = std::chrono::hours(1)) {
  Ledger l(window);
  l.Start(S(0));
  Steps(l, 1, 100, S(60));
  l.FaultDetected(S(1055), S(1065));
  EXPECT_TRUE(l.Enter(TimeCategory::kRecovery, S(1070)).ok());
  Steps(l, 91, 110, S(1130));
  return l;
}

TEST(Ledger, ScriptedTimelineSplitsWallTimeExactly) {
  Ledger l = ScriptedTimeline();
  TimeBreakdown b = l.Cumulative(S(1320));
  EXPECT_EQ(b.wall, Secs(1320));
  EXPECT_EQ(b.of(TimeCategory::kStartup), Secs(60));
  EXPECT_EQ(b.productive(), Secs(990 + 100));
  EXPECT_EQ(b.of(TimeCategory::kRecomputation), Secs(5 + 90));  // step in flight + 92..100
  EXPECT_EQ(b.of(TimeCategory::kDetection), Secs(10));
  EXPECT_EQ(b.of(TimeCategory::kLocalization), Secs(5));
  EXPECT_EQ(b.of(TimeCategory::kRecovery), Secs(60));
  EXPECT_EQ(b.unproductive(), Secs(230));
  EXPECT_DOUBLE_EQ(b.ettr(), 1090.0 / 1320.0);
  EXPECT_EQ(l.high_water_step(), 110);
}

// An elastic job on 3 of its 4 replicas does the same global batch a step
// at a slower pace: its steps are productive for the time the full job
// would have taken (10 s), degraded for the rest; back at full width,
// whole again.
TEST(Ledger, StepsBelowFullWidthAreDegradedByTheirPace) {
  Ledger l;
  l.Start(S(0));
  Steps(l, 1, 10, S(10));  // step 10 at 100 s
  l.FaultDetected(S(100), S(100));
  ASSERT_TRUE(l.Enter(TimeCategory::kRecovery, S(100)).ok());
  l.SetShare(0.75);
  Time at = S(110);
  l.StepCompleted(11, at);  // ends recovery
  for (int64_t k = 12; k <= 21; ++k) l.StepCompleted(k, at += Secs(20));  // 21 at 310
  EXPECT_EQ(l.Cumulative(S(320)).of(TimeCategory::kDegraded), Secs(100 + 5)) << "the open stretch at the last pace";
  ASSERT_TRUE(l.Enter(TimeCategory::kRecovery, S(310)).ok());
  l.SetShare(1.0);
  Steps(l, 22, 23, S(320));
  TimeBreakdown b = l.Cumulative(S(330));
  EXPECT_EQ(b.of(TimeCategory::kDegraded), Secs(100));  // 200 s at half the pace
  EXPECT_EQ(b.of(TimeCategory::kStartup), Secs(10));
  EXPECT_EQ(b.productive(), Secs(90 + 100 + 10));
  EXPECT_EQ(b.of(TimeCategory::kRecovery), Secs(20));
  Duration sum{0};
  for (Duration d : b.by_category) sum += d;
  EXPECT_EQ(sum, b.wall);
  // Narrow stretches merge into one segment at their mean share.
  int narrow = 0;
  for (const LedgerSegment& s : l.Timeline(S(330))) narrow += s.share < 1;
  EXPECT_EQ(narrow, 1);
}

// A job that starts narrow has no full-width pace: the replicas' share
// stands for it.
TEST(Ledger, WithNoFullWidthPaceTheReplicasShareStands) {
  Ledger l;
  l.Start(S(0));
  l.SetShare(0.75);
  Steps(l, 1, 11, S(10));  // 11 at 110
  TimeBreakdown b = l.Cumulative(S(110));
  EXPECT_EQ(b.of(TimeCategory::kDegraded), Secs(25));
  EXPECT_EQ(b.productive(), Secs(75));
}

TEST(Ledger, SlidingWindowSeesOnlyItsWindow) {
  Ledger l = ScriptedTimeline(std::chrono::minutes(10));
  // [720, 1320]: productive 720..1050 and 1220..1320, and all of the incident.
  TimeBreakdown w = l.Window(S(1320));
  EXPECT_EQ(w.wall, Secs(600));
  EXPECT_EQ(w.productive(), Secs(330 + 100));
  EXPECT_EQ(w.of(TimeCategory::kStartup), Secs(0));
  EXPECT_DOUBLE_EQ(w.ettr(), 430.0 / 600.0);
}

TEST(Ledger, WindowRecoversAfterAnHourOfCleanTraining) {
  Ledger l = ScriptedTimeline();
  Time last = Steps(l, 111, 470, S(1330));  // 360 more steps: 3600 s
  ASSERT_EQ(last, S(4920));
  EXPECT_DOUBLE_EQ(l.Window(S(4920)).ettr(), 1.0);
  EXPECT_DOUBLE_EQ(l.Cumulative(S(4920)).ettr(), (1090.0 + 3600.0) / 4920.0);
}

TEST(Ledger, WindowIsClippedToTheJobsLife) {
  Ledger l;
  l.Start(S(100));
  Steps(l, 1, 3, S(110));
  TimeBreakdown w = l.Window(S(130));
  EXPECT_EQ(w.wall, Secs(30));
  EXPECT_EQ(w.productive(), Secs(20));
  EXPECT_EQ(w.of(TimeCategory::kStartup), Secs(10));
}

TEST(Ledger, StepInFlightCountsByWhatItWillBe) {
  Ledger l = ScriptedTimeline();
  // Between step 110 and 111: new work.
  EXPECT_EQ(l.Cumulative(S(1325)).productive(), Secs(1095));
  // Between step 91 and 92: redoing lost work.
  Ledger r;
  r.Start(S(0));
  Steps(r, 1, 10, S(10));
  r.FaultDetected(S(100), S(100));
  ASSERT_TRUE(r.Enter(TimeCategory::kRecovery, S(100)).ok());
  r.StepCompleted(6, S(130));
  EXPECT_EQ(r.Cumulative(S(135)).of(TimeCategory::kRecomputation), Secs(5));
}

TEST(Ledger, WaitingForMachinesIsItsOwnCategory) {
  Ledger l;
  l.Start(S(0));
  Steps(l, 1, 2, S(10));
  l.FaultDetected(std::nullopt, S(25));
  ASSERT_TRUE(l.Enter(TimeCategory::kWaiting, S(25)).ok());
  ASSERT_TRUE(l.Enter(TimeCategory::kRecovery, S(325)).ok());
  l.StepCompleted(3, S(385));
  TimeBreakdown b = l.Cumulative(S(385));
  EXPECT_EQ(b.of(TimeCategory::kWaiting), Secs(300));
  EXPECT_EQ(b.of(TimeCategory::kRecovery), Secs(60));
  EXPECT_EQ(b.of(TimeCategory::kRecomputation), Secs(5));  // unknown fault time: all of it lost
  EXPECT_EQ(b.of(TimeCategory::kDetection), Secs(0));
  EXPECT_EQ(b.productive(), Secs(10));
}

TEST(Ledger, ManualRestartIsManualTime) {
  Ledger l;
  l.Start(S(0));
  Steps(l, 1, 5, S(10));
  ASSERT_TRUE(l.Enter(TimeCategory::kManual, S(50)).ok());
  l.StepCompleted(6, S(110));
  TimeBreakdown b = l.Cumulative(S(110));
  EXPECT_EQ(b.of(TimeCategory::kManual), Secs(60));
  EXPECT_EQ(b.productive(), Secs(40));
}

TEST(Ledger, StoppedJobAccruesNoMoreTime) {
  Ledger l;
  l.Start(S(0));
  Steps(l, 1, 3, S(10));
  l.FaultDetected(S(35), S(40));
  l.Stop(S(45));
  TimeBreakdown b = l.Cumulative(S(1000));
  EXPECT_EQ(b.wall, Secs(45));
  EXPECT_EQ(b.of(TimeCategory::kLocalization), Secs(5));
  EXPECT_FALSE(l.Enter(TimeCategory::kRecovery, S(50)).ok());
  l.StepCompleted(4, S(60));
  EXPECT_EQ(l.Cumulative(S(1000)).wall, Secs(45));
}

TEST(Ledger, LateReportsNeverReorderTime) {
  Ledger l;
  l.Start(S(0));
  Steps(l, 1, 10, S(10));
  // The fault time is earlier than the last step: moved up to it.
  l.FaultDetected(S(95), S(110));
  ASSERT_TRUE(l.Enter(TimeCategory::kRecovery, S(110)).ok());
  // A step that finished before the fault, reported late: recovery goes on.
  l.StepCompleted(11, S(105));
  TimeBreakdown b = l.Cumulative(S(170));
  EXPECT_EQ(b.of(TimeCategory::kDetection), Secs(10));
  EXPECT_EQ(b.of(TimeCategory::kRecovery), Secs(60));
  EXPECT_EQ(l.high_water_step(), 11);
}

TEST(Ledger, EnterRejectsCategoriesThatComeFromStepsAndFaults) {
  Ledger l;
  EXPECT_EQ(l.Enter(TimeCategory::kRecovery, S(0)).code(), Status::Code::kFailedPrecondition);
  l.Start(S(0));
  for (TimeCategory c : {TimeCategory::kProductive, TimeCategory::kRecomputation, TimeCategory::kDetection}) {
    EXPECT_EQ(l.Enter(c, S(1)).code(), Status::Code::kInvalidArgument) << TimeCategoryName(c);
  }
}

TEST(Ledger, CategoriesAlwaysSumToWallTime) {
  // A long, busy history: an incident every 100 steps, each with its own
  // mix of detection, waiting and recovery. Every query splits exactly.
  Ledger l(std::chrono::minutes(30));
  l.Start(S(0));
  Time t = S(30);
  int64_t step = 0;
  for (int episode = 0; episode < 200; ++episode) {
    t = Steps(l, step + 1, step + 100, t) + Secs(10);
    step += 100;
    l.FaultDetected(t + Secs(3), t + Secs(3 + episode % 7));
    t += Secs(10 + episode % 7);
    if (episode % 5 == 0) {
      ASSERT_TRUE(l.Enter(TimeCategory::kWaiting, t).ok());
      t += Secs(120);
    }
    ASSERT_TRUE(l.Enter(TimeCategory::kRecovery, t).ok());
    step -= episode % 4;  // lost steps to redo
    t += Secs(45);
  }
  for (Time q = S(0); q <= t; q += Secs(997)) {
    for (const TimeBreakdown& b : {l.Cumulative(q), l.Window(q)}) {
      Duration sum{0};
      for (Duration d : b.by_category) sum += d;
      ASSERT_EQ(sum, b.wall) << "at " << FormatTime(q);
    }
  }
}

}  // namespace
}  // namespace bulwark::controller

namespace bulwark::controller {
namespace {

TEST(Ledger, TimelineIsContiguousAndMatchesCumulative) {
  // The report draws the timeline; it must tile the wall time exactly,
  // the open segment included, and agree with the cumulative split.
  Ledger l;
  l.Start(S(0));
  Time t = Steps(l, 1, 10, S(5));
  l.FaultDetected(t + Secs(1), t + Secs(2));
  ASSERT_TRUE(l.Enter(TimeCategory::kRecovery, t + Secs(3)).ok());
  t = Steps(l, 8, 12, t + Secs(6));
  const Time now = t + Secs(1);
  const std::vector<LedgerSegment> tl = l.Timeline(now);
  ASSERT_FALSE(tl.empty());
  EXPECT_EQ(tl.front().start, S(0));
  EXPECT_EQ(tl.back().end, now);
  TimeBreakdown from_timeline;
  for (size_t i = 0; i < tl.size(); ++i) {
    if (i > 0) {
      EXPECT_EQ(tl[i].start, tl[i - 1].end);
    }
    from_timeline.by_category[static_cast<int>(tl[i].category)] += tl[i].end - tl[i].start;
  }
  EXPECT_EQ(from_timeline.by_category, l.Cumulative(now).by_category);
}

}  // namespace
}  // namespace bulwark::controller
