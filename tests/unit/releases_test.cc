// Releases and requeue mode, as specifications (controller/releases.h,
// policy_releases.cc): hot updates now, at the next restart or forced after
// their age; rollbacks by the operator, after a crash that follows an
// update; and the conventional requeue baseline. The fixture's job is 4
// machines (m01..m04, 2 ranks each) with standbys s01 and s02; step k
// completes at 10k s.
#include <gtest/gtest.h>

#include "support/controller_fixture.h"

namespace bulwark::controller {
namespace {

using testing::Briefs;
using testing::Crash;
using testing::DeviceFailed;
using testing::Job;
using testing::Lines;
using testing::S;
using testing::Step;

Event Update(int release, bool now, Time at) { return ReleaseCreated{release, now, "fix the loader", at}; }

// `update --now` as the plane carries it out: the machines stage the
// release (ReleaseStaged from each), then the job restarts on it.
std::vector<Action> UpdateNow(Job& job, int release, Time at) {
  EXPECT_EQ(Briefs(job.Do(Update(release, true, at))), (Lines{"stage r" + std::to_string(release)}));
  std::vector<Action> acts;
  for (const char* m : {"m01", "m02", "m03", "m04"}) acts = job.Do(ReleaseStaged{m, release, true, "", at + std::chrono::seconds(1)});
  return acts;
}

TEST(Releases, LazyUpdateRidesTheNextRestart) {
  Job job;
  job.StartAndRun(10);
  EXPECT_EQ(Briefs(job.Do(Update(2, false, S(101)))), (Lines{"stage r2"})) << "lazy: nothing restarts for it";
  EXPECT_EQ(job.state().releases.pending, 2);
  EXPECT_EQ(job.state().releases.applied, 1);
  // The next restart a fault causes anyway applies it.
  EXPECT_EQ(Briefs(job.Do(Crash("m02", "", S(105)))), (Lines{"restart_all g2 m01,m02,m03,m04 ckpt 10 r2"}));
  EXPECT_EQ(job.state().releases.applied, 2);
  EXPECT_EQ(job.state().releases.pending, 0);
  // And the one after keeps it.
  job.Do(Step(11, S(120)));
  EXPECT_EQ(Briefs(job.Do(DeviceFailed("m03", S(125)))),
            (Lines{"evict m03", "activate s01", "restart_all g3 m01,m02,s01,m04 ckpt 10 r2"}));
}

TEST(Releases, UpdateNowRestartsInPlaceAsAManualIncident) {
  Job job;
  job.StartAndRun(10);
  EXPECT_EQ(Briefs(job.Do(Update(2, true, S(101)))), (Lines{"stage r2"})) << "staged first; the job trains on";
  EXPECT_EQ(job.state().job, JobState::kRunning);
  EXPECT_TRUE(job.controller->incidents().empty());
  EXPECT_TRUE(job.Do(ReleaseStaged{"m01", 2, true, "", S(101.5)}).empty());
  EXPECT_TRUE(job.Do(ReleaseStaged{"m02", 2, true, "", S(101.6)}).empty());
  EXPECT_TRUE(job.Do(ReleaseStaged{"m03", 2, false, "cannot", S(101.7)}).empty());
  EXPECT_EQ(Briefs(job.Do(ReleaseStaged{"m04", 2, true, "", S(102)})), (Lines{"restart_all g2 m01,m02,m03,m04 ckpt 10 r2"}))
      << "every machine answered";
  const Incident& inc = job.LastIncident();
  EXPECT_NE(inc.why.find("staged on 3 of 4 machines in 1s; the others start cold"), std::string::npos) << inc.why;
  EXPECT_EQ(inc.cls, IncidentClass::kManual);
  EXPECT_EQ(inc.resolution, Resolution::kUpdated);
  EXPECT_TRUE(inc.evicted.empty()) << "same machines";
  job.Do(Step(11, S(110)));
  EXPECT_TRUE(job.LastIncident().closed);
  EXPECT_EQ(job.state().ledger.Cumulative(S(110)).of(TimeCategory::kManual), Duration(8000))
      << "the update's seconds are the operator's";
}

TEST(Releases, StagingThatRunsOutOfTimeRestartsAnyway) {
  PolicyConfig config;
  config.release_stage_timeout = std::chrono::seconds(30);
  Job job(4, 2, config);
  job.StartAndRun(10);
  job.Do(Update(2, true, S(101)));
  job.Do(ReleaseStaged{"m01", 2, true, "", S(102)});
  EXPECT_TRUE(job.Do(StageDue{2, S(120)}).empty()) << "before its deadline";
  EXPECT_EQ(Briefs(job.Do(StageDue{2, S(131)})), (Lines{"restart_all g2 m01,m02,m03,m04 ckpt 10 r2"}));
  EXPECT_NE(job.LastIncident().why.find("staging ran out of time: staged on 1 of 4 machines in 30s"),
            std::string::npos)
      << job.LastIncident().why;
  // Late answers and a late deadline change nothing.
  EXPECT_TRUE(job.Do(ReleaseStaged{"m02", 2, true, "", S(132)}).empty());
  EXPECT_TRUE(job.Do(StageDue{2, S(133)}).empty());
}

TEST(Releases, AFaultWhileStagingRestartsOnTheNewReleaseAndEndsTheStaging) {
  Job job;
  job.StartAndRun(10);
  job.Do(Update(2, true, S(101)));
  EXPECT_EQ(Briefs(job.Do(Crash("m02", "", S(102)))), (Lines{"restart_all g2 m01,m02,m03,m04 ckpt 10 r2"}));
  EXPECT_EQ(job.state().releases.staging, 0);
  job.Do(Step(11, S(110)));
  for (const char* m : {"m01", "m02", "m03", "m04"}) {
    EXPECT_TRUE(job.Do(ReleaseStaged{m, 2, true, "", S(111)}).empty()) << "no second restart for it";
  }
}

TEST(Releases, RequeueModeStagesNothing) {
  Job job(4, 2, {}, JobSpec::Recovery::kRequeue, std::chrono::seconds(30));
  job.StartAndRun(10);
  EXPECT_EQ(Briefs(job.Do(Update(2, false, S(101)))), (Lines{})) << "the baseline sets nothing up ahead";
}

TEST(Releases, LazyUpdateIsForcedAfterItsAge) {
  PolicyConfig config;
  config.update_force_after = std::chrono::hours(1);
  Job job(4, 2, config);
  job.StartAndRun(10);
  job.Do(Update(2, false, S(101)));
  auto acts = job.Do(ReleaseDue{2, S(3701)});
  EXPECT_EQ(Briefs(acts), (Lines{"restart_all g2 m01,m02,m03,m04 ckpt 10 r2"}));
  EXPECT_NE(job.LastIncident().cause.find("release 2 forced: it waited 60min"), std::string::npos)
      << job.LastIncident().cause;
  // Applied: a late duplicate is stale.
  job.Do(Step(11, S(3710)));
  EXPECT_TRUE(job.Do(ReleaseDue{2, S(3720)}).empty());
}

TEST(Releases, NewerLazyReleaseSupersedesThePendingOne) {
  Job job;
  job.StartAndRun(10);
  job.Do(Update(2, false, S(101)));
  job.Do(Update(3, false, S(102)));
  EXPECT_TRUE(job.Do(ReleaseDue{2, S(103)}).empty()) << "release 2 will never run";
  EXPECT_EQ(Briefs(job.Do(Crash("m01", "", S(105)))), (Lines{"restart_all g2 m01,m02,m03,m04 ckpt 10 r3"}));
}

TEST(Releases, OperatorRollsBackToThePreviousRelease) {
  Job job;
  job.StartAndRun(10);
  UpdateNow(job, 2, S(101));
  job.Do(Step(11, S(110)));
  auto acts = job.Do(RollbackRequested{0, "loss diverged", S(115)});
  EXPECT_EQ(Briefs(acts), (Lines{"restart_all g3 m01,m02,m03,m04 ckpt 10"})) << "release 1 again";
  EXPECT_EQ(job.LastIncident().resolution, Resolution::kRolledBack);
  EXPECT_EQ(job.state().releases.rolled_back, (std::set<int>{2}));
  // Nothing older is left.
  job.Do(Step(12, S(120)));
  Result<std::vector<Action>> r = job.controller->Handle(RollbackRequested{0, "", S(121)}, S(121));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no earlier release"), std::string::npos) << r.status().ToString();
}

TEST(Releases, BadRollbacksAreRefusedAndChangeNothing) {
  Job job;
  job.StartAndRun(10);
  Result<std::vector<Action>> past = job.controller->Handle(RollbackRequested{0, "", S(101)}, S(101));
  ASSERT_FALSE(past.ok()) << "release 1 is the first";
  Result<std::vector<Action>> missing = job.controller->Handle(RollbackRequested{7, "", S(102)}, S(102));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("releases are 1..1"), std::string::npos) << missing.status().ToString();
  Result<std::vector<Action>> same = job.controller->Handle(RollbackRequested{1, "", S(103)}, S(103));
  ASSERT_FALSE(same.ok()) << "already runs release 1";
  EXPECT_EQ(job.state().job, JobState::kRunning);
  EXPECT_TRUE(job.controller->incidents().empty());
  // Release numbers are the controller's: a gap is refused.
  EXPECT_FALSE(job.controller->Handle(Update(3, true, S(104)), S(104)).ok());
}

TEST(Releases, CodeErrorShortlyAfterAnUpdateRollsBack) {
  Job job;
  job.StartAndRun(10);
  UpdateNow(job, 2, S(101));
  job.Do(Step(11, S(110)));
  auto acts = job.Do(Crash("m03", "import_error", S(130)));
  EXPECT_EQ(Briefs(acts), (Lines{"restart_all g3 m01,m02,m03,m04 ckpt 10"})) << "back on release 1, no eviction";
  const Incident& inc = job.LastIncident();
  EXPECT_EQ(inc.cls, IncidentClass::kExplicit);
  EXPECT_EQ(inc.resolution, Resolution::kRolledBack);
  EXPECT_NE(inc.why.find("rolled back release 2 -> 1"), std::string::npos) << inc.why;
  // Release 2 is never rolled forward to by the policy again.
  job.Do(Step(12, S(140)));
  EXPECT_EQ(job.state().releases.RollbackTarget(), 0);
}

TEST(Releases, AnyCrashBeforeAnUpdatesFirstStepRollsBack) {
  // A release that cannot start (a bad flag: exit 2, no signature) is
  // rolled back at its first crash; no healthy machine is evicted for it.
  Job job;
  job.StartAndRun(10);
  UpdateNow(job, 2, S(101));
  EXPECT_EQ(Briefs(job.Do(Crash("m02", "", S(103)))), (Lines{"restart_all g3 m01,m02,m03,m04 ckpt 10"}));
  EXPECT_EQ(job.LastIncident().resolution, Resolution::kRolledBack);
  EXPECT_NE(job.LastIncident().why.find("came before its first step"), std::string::npos) << job.LastIncident().why;
  // Back on release 1, a crash before its first step is the usual reattempt:
  // a rollback is no update.
  EXPECT_EQ(Briefs(job.Do(Crash("m03", "", S(106)))), (Lines{"restart_all g4 m01,m02,m03,m04 ckpt 10"}));
  EXPECT_EQ(job.LastIncident().resolution, Resolution::kReattempt);
}

TEST(Releases, CrashAfterTheUpdatesFirstStepIsTheUsualReattempt) {
  Job job;
  job.StartAndRun(10);
  UpdateNow(job, 2, S(101));
  job.Do(Step(11, S(110)));
  EXPECT_EQ(Briefs(job.Do(Crash("m02", "", S(115)))), (Lines{"restart_all g3 m01,m02,m03,m04 ckpt 10 r2"}));
  EXPECT_EQ(job.LastIncident().resolution, Resolution::kReattempt);
}

TEST(Releases, CrashLoopAfterAnUpdateRollsBackInsteadOfStopping) {
  Job job;
  job.StartAndRun(10);
  UpdateNow(job, 2, S(101));  // restart g2
  job.Do(Step(11, S(110)));         // release 2 ran a step
  job.Do(Crash("m01", "", S(115)));  // reattempt g3
  job.Do(Crash("m02", "", S(118)));  // reattempt g4
  auto acts = job.Do(Crash("m03", "", S(121)));
  EXPECT_EQ(Briefs(acts), (Lines{"restart_all g5 m01,m02,m03,m04 ckpt 10"})) << "a crash loop: back to release 1";
  EXPECT_EQ(job.LastIncident().resolution, Resolution::kRolledBack);
}

TEST(Releases, CodeErrorLongAfterAnUpdateIsTheUsualCrash) {
  PolicyConfig config;
  config.rollback_window = std::chrono::minutes(5);
  Job job(4, 2, config);
  job.StartAndRun(10);
  UpdateNow(job, 2, S(101));
  job.RunSteps(11, 60, S(110));  // 10 min of steps
  EXPECT_EQ(Briefs(job.Do(Crash("m03", "import_error", S(700)))), (Lines{"restart_all g3 m01,m02,m03,m04 ckpt 60 r2"}))
      << "a reattempt on the same release";
  EXPECT_EQ(job.LastIncident().resolution, Resolution::kReattempt);
}

// ---------------------------------------------------------------------------
// Requeue mode: the conventional baseline
// ---------------------------------------------------------------------------

TEST(Requeue, MachineFaultStopsEverythingThenRestartsFreshAfterTheDelay) {
  Job job(4, 2, {}, JobSpec::Recovery::kRequeue, std::chrono::seconds(60));
  job.StartAndRun(10);
  EXPECT_EQ(Briefs(job.Do(DeviceFailed("m02", S(105)))), (Lines{"evict m02", "requeue until t+165s"}));
  EXPECT_EQ(job.state().job, JobState::kWaitingForMachines);
  EXPECT_EQ(job.LastIncident().resolution, Resolution::kRequeued);
  EXPECT_TRUE(job.Do(RequeueDue{S(150)}).empty()) << "before its time: nothing";
  // Machines acquired cold: nothing survived in memory.
  EXPECT_EQ(Briefs(job.Do(RequeueDue{S(165)})), (Lines{"activate s01", "restart_all g2 m01,s01,m03,m04 ckpt 10 fresh"}));
  EXPECT_EQ(job.state().job, JobState::kRestarting);
  job.Do(Step(1, S(200)));
  const Incident& inc = job.LastIncident();
  EXPECT_TRUE(inc.closed);
  ASSERT_TRUE(inc.RecoverDuration().has_value());
  EXPECT_GE(*inc.RecoverDuration(), std::chrono::seconds(60)) << "the delay is part of recovery";
}

TEST(Requeue, SoftwareCrashIsRequeuedToo) {
  Job job(4, 2, {}, JobSpec::Recovery::kRequeue, std::chrono::seconds(60));
  job.StartAndRun(10);
  EXPECT_EQ(Briefs(job.Do(Crash("m02", "", S(105)))), (Lines{"requeue until t+165s"}));
  // Exits of the stopped ranks while requeued are no new faults.
  EXPECT_TRUE(job.Do(Crash("m03", "", S(106))).empty());
  EXPECT_EQ(Briefs(job.Do(RequeueDue{S(165)})), (Lines{"restart_all g2 m01,m02,m03,m04 ckpt 10 fresh"}));
}

TEST(Requeue, AnUpdateIsARequeueToo) {
  Job job(4, 2, {}, JobSpec::Recovery::kRequeue, std::chrono::seconds(30));
  job.StartAndRun(10);
  EXPECT_EQ(Briefs(job.Do(Update(2, true, S(101)))), (Lines{"requeue until t+131s"}));
  EXPECT_EQ(Briefs(job.Do(RequeueDue{S(131)})), (Lines{"restart_all g2 m01,m02,m03,m04 ckpt 10 r2 fresh"}));
}

}  // namespace
}  // namespace bulwark::controller
