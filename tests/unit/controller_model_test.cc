// The controller's model as specifications: machine and job lifecycles, the
// standby pool's size, reconcile, and incident timings.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <utility>

#include "controller/reconcile.h"
#include "support/controller_fixture.h"

namespace bulwark::controller {
namespace {

using testing::Briefs;
using testing::DeviceFailed;
using testing::HeartbeatLost;
using testing::Job;
using testing::Joined;
using testing::Lines;
using testing::S;
using testing::Secs;
using testing::Step;

// ---------------------------------------------------------------------------
// Lifecycles
// ---------------------------------------------------------------------------

TEST(MachineState, IllegalTransitionIsReported) {
  Status st = CheckMachineTransition(MachineState::kEvicted, MachineState::kActive);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(st.message().find("evicted -> active"), std::string::npos) << st.message();

  MachineStatus m;
  m.id = "m07";
  m.state = MachineState::kEvicted;
  Status moved = m.MoveTo(MachineState::kStandby, S(1), "try");
  ASSERT_FALSE(moved.ok());
  EXPECT_NE(moved.message().find("m07"), std::string::npos) << moved.message();
  EXPECT_EQ(m.state, MachineState::kEvicted);  // a refused step changes nothing
}

TEST(MachineState, TransitionTableIsTheDocumentedLifecycle) {
  using S_ = MachineState;
  const std::set<std::pair<S_, S_>> legal = {
      {S_::kJoining, S_::kStandby},    {S_::kJoining, S_::kEvicted},
      {S_::kStandby, S_::kActive},     {S_::kStandby, S_::kDiagnosing}, {S_::kStandby, S_::kEvicted},
      {S_::kActive, S_::kStandby},     {S_::kActive, S_::kDiagnosing},  {S_::kActive, S_::kEvicted},
      {S_::kDiagnosing, S_::kStandby}, {S_::kDiagnosing, S_::kActive},  {S_::kDiagnosing, S_::kEvicted},
      {S_::kEvicted, S_::kJoining},
  };
  for (int f = 0; f < kNumMachineStates; ++f) {
    for (int t = 0; t < kNumMachineStates; ++t) {
      auto from = static_cast<S_>(f), to = static_cast<S_>(t);
      EXPECT_EQ(CheckMachineTransition(from, to).ok(), legal.count({from, to}) == 1)
          << MachineStateName(from) << " -> " << MachineStateName(to);
    }
  }
}

// The hash index behind FindMachine finds what the ordered map holds, in
// the state it belongs to: a copy's lookups land in the copy, never in the
// original's records.
TEST(ClusterState, FindMachineFindsInItsOwnCopy) {
  ClusterState a;
  const Time t0{};
  for (const char* id : {"m03", "m01", "m02"}) ASSERT_TRUE(AddMachine(a, id, t0).ok());
  ASSERT_NE(a.FindMachine("m02"), nullptr);
  EXPECT_EQ(a.FindMachine("m02")->id, "m02");
  EXPECT_EQ(a.FindMachine("m09"), nullptr);
  ClusterState b = a;
  ASSERT_TRUE(AddMachine(b, "m04", t0).ok());
  ASSERT_TRUE(SetMachineState(b, "m01", MachineState::kStandby, t0, "checked").ok());
  EXPECT_EQ(b.FindMachine("m01")->state, MachineState::kStandby);
  EXPECT_EQ(a.FindMachine("m01")->state, MachineState::kJoining);
  EXPECT_EQ(a.FindMachine("m04"), nullptr);
  EXPECT_EQ(b.FindMachine("m04")->id, "m04");
  a = b;  // assigned: finds the new records
  EXPECT_EQ(a.FindMachine("m01")->state, MachineState::kStandby);
  EXPECT_NE(a.FindMachine("m01"), b.FindMachine("m01"));
  ClusterState c = std::move(b);  // moved: the nodes move with the map
  EXPECT_EQ(c.FindMachine("m04")->id, "m04");
  EXPECT_FALSE(AddMachine(c, "m04", t0).ok());  // known, through the index
}

TEST(JobState, StoppedIsTerminal) {
  for (int t = 0; t < kNumJobStates; ++t) {
    Status st = CheckJobTransition(JobState::kStopped, static_cast<JobState>(t));
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("stopped -> "), std::string::npos);
  }
  EXPECT_TRUE(CheckJobTransition(JobState::kRestarting, JobState::kRestarting).ok());
  EXPECT_FALSE(CheckJobTransition(JobState::kWaitingForMachines, JobState::kRunning).ok());
}

// ---------------------------------------------------------------------------
// Standby pool sizing
// ---------------------------------------------------------------------------

TEST(StandbyPool, TargetIsP99OfBinomial) {
  EXPECT_EQ(*BinomialQuantile(1200, 0.005, 0.99), 12);
  EXPECT_EQ(*BinomialQuantile(2048, 0.002, 0.99), 9);
  // The rest of the reference table (reference/byterobust.md §3).
  EXPECT_EQ(*BinomialQuantile(1200, 0.002, 0.99), 7);
  EXPECT_EQ(*BinomialQuantile(1200, 0.01, 0.99), 21);
  EXPECT_EQ(*BinomialQuantile(2048, 0.005, 0.99), 18);
  EXPECT_EQ(*BinomialQuantile(2048, 0.01, 0.99), 32);
}

// Exact CDF by the pmf recurrence in long double, independent of the
// implementation's log-space sum.
std::vector<long double> ExactCdf(int n, long double p) {
  std::vector<long double> cdf(n + 1);
  long double pmf = std::pow(1.0L - p, static_cast<long double>(n)), sum = 0;
  for (int k = 0; k <= n; ++k) {
    sum += pmf;
    cdf[k] = sum;
    pmf = pmf * (n - k) / (k + 1) * p / (1.0L - p);
  }
  return cdf;
}

TEST(StandbyPool, QuantileIsTheSmallestKWhoseExactCdfReachesQ) {
  for (int n : {1, 2, 5, 10, 37, 100, 300, 1000}) {
    for (double p : {0.001, 0.01, 0.1, 0.5, 0.9}) {
      std::vector<long double> cdf = ExactCdf(n, p);
      for (double q : {0.5, 0.9, 0.99, 0.999}) {
        int k = *BinomialQuantile(n, p, q);
        SCOPED_TRACE("n=" + std::to_string(n) + " p=" + std::to_string(p) + " q=" + std::to_string(q));
        EXPECT_GE(cdf[k], q - 1e-12L);
        if (k > 0) {
          EXPECT_LT(cdf[k - 1], q + 1e-12L);
        }
      }
    }
  }
}

TEST(StandbyPool, HugeFleetDoesNotUnderflow) {
  // (1 - 0.005)^1e6 is 0 in double; the log-space sum is not bothered.
  // Expected values from an independent high-precision sum.
  EXPECT_EQ(*BinomialQuantile(1000000, 0.005, 0.99), 5165);
  EXPECT_EQ(*BinomialQuantile(100000, 0.002, 0.99), 234);
}

TEST(StandbyPool, EdgesAndInvalidArguments) {
  EXPECT_EQ(*BinomialQuantile(0, 0.5, 0.99), 0);
  EXPECT_EQ(*BinomialQuantile(100, 0.0, 0.99), 0);
  EXPECT_EQ(*BinomialQuantile(100, 1.0, 0.99), 100);
  EXPECT_EQ(*BinomialQuantile(100, 0.01, 1.0), 100);
  EXPECT_FALSE(BinomialQuantile(-1, 0.1, 0.99).ok());
  EXPECT_FALSE(BinomialQuantile(10, 1.5, 0.99).ok());
  EXPECT_FALSE(BinomialQuantile(10, 0.1, 0.0).ok());
  EXPECT_FALSE(BinomialQuantile(10, std::nan(""), 0.99).ok());
}

TEST(StandbyPool, ReportsDeficitForTheJobSize) {
  Job job(4, 0);
  StandbyReport r = job.controller->standby();
  EXPECT_EQ(r.target, 1);  // P99 of Binomial(4, 0.005)
  EXPECT_EQ(r.deficit(), 1);
  EXPECT_EQ(Briefs(job.Reconcile(S(0))).back(), "replenish 1");
}

// ---------------------------------------------------------------------------
// Reconcile
// ---------------------------------------------------------------------------

TEST(Reconcile, WorldAlreadyMatchesDoesNothing) {
  Job job;
  job.StartAndRun(3);
  EXPECT_TRUE(Reconcile(job.state(), job.controller->config(), S(40)).empty());
  EXPECT_TRUE(job.Reconcile(S(40)).empty());
  EXPECT_TRUE(job.Reconcile(S(41)).empty());
}

TEST(Reconcile, StartsThePendingJobOnStandbysInIdOrder) {
  Job job;
  EXPECT_EQ(Briefs(job.Reconcile(S(0))), (Lines{"activate m01", "activate m02", "activate m03",
                                                "activate m04", "restart_all g1 m01,m02,m03,m04 ckpt 0"}));
  EXPECT_EQ(job.state().job, JobState::kRestarting);
  EXPECT_TRUE(job.Reconcile(S(1)).empty());
}

TEST(Reconcile, PendingJobWithTooFewMachinesWaitsThenStarts) {
  JobSpec spec{"small", 4, 2, "bulwark-train"};
  Result<Controller> c = Controller::Create(spec, PolicyConfig{}, {"m01"}, S(0));
  ASSERT_TRUE(c.ok());
  // P99 of Binomial(2, 0.005) is 0: a 2-machine job keeps no standby.
  EXPECT_EQ(Briefs(*c->Reconcile(S(0))), (Lines{"wait 1"}));
  EXPECT_EQ(Briefs(*c->Handle(Joined("m02", true, S(60)), S(60))),
            (Lines{"activate m01", "activate m02", "restart_all g1 m01,m02 ckpt 0"}));
  // Waiting before the first start is waiting, not a fault.
  EXPECT_TRUE(c->incidents().empty());
  EXPECT_EQ(c->Cumulative(S(60)).of(TimeCategory::kWaiting), Secs(60));
}

TEST(Reconcile, SameStateGivesSameIds) {
  Job job(4, 0);
  job.StartAndRun(3);
  job.Do(DeviceFailed("m02", S(35)));
  std::vector<Action> a = Reconcile(job.state(), job.controller->config(), S(40));
  std::vector<Action> b = Reconcile(job.state(), job.controller->config(), S(50));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].id, b[i].id);
  // And applying the repeat changes nothing.
  JobState before = job.state().job;
  job.Reconcile(S(60));
  EXPECT_EQ(job.state().job, before);
  EXPECT_EQ(job.state().placement.generation, 1);
}

TEST(Reconcile, ReplacementKeepsEveryRankOnItsSlot) {
  Job job;
  job.StartAndRun(3);
  job.Do(DeviceFailed("m03", S(35)));
  const Placement& p = job.state().placement;
  EXPECT_EQ(p.MachineOf(4), "s01");
  EXPECT_EQ(p.MachineOf(5), "s01");
  EXPECT_EQ(p.MachineOf(3), "m02");
  EXPECT_EQ(p.MachineOf(6), "m04");
  EXPECT_EQ(p.world_size(), 8);
}

TEST(Reconcile, LargeJobKeepsItsPoolAtTheBinomialTarget) {
  Job job(1200, 12);  // the pool target for 1200 machines at 0.005/day is 12
  job.StartAndRun(1);
  EXPECT_TRUE(job.Reconcile(S(20)).empty());
  auto acts = job.Do(HeartbeatLost("m0600", S(20), S(25)));
  ASSERT_EQ(acts.size(), 4u);
  EXPECT_EQ(testing::Brief(acts[0]), "evict m0600");
  EXPECT_EQ(testing::Brief(acts[1]), "activate s01");
  EXPECT_EQ(acts[2].kind, ActionKind::kRestartAll);
  EXPECT_EQ(acts[2].placement.slots[599], "s01");
  EXPECT_EQ(testing::Brief(acts[3]), "replenish 1");
}

// An elastic job the pool cannot fill goes on with the machines it has, its
// ranks renumbered densely, and grows back as machines join; a standby job
// in the same place waits.
TEST(Reconcile, AnElasticJobWithNoStandbyGoesOnNarrowerAndGrowsBack) {
  Job job(4, 0, PolicyConfig{}, JobSpec::Recovery::kElastic);
  job.StartAndRun(3);
  auto acts = job.Do(DeviceFailed("m02", S(35)));
  // The pool asks for a machine meanwhile (replenish).
  EXPECT_EQ(Briefs(acts), (Lines{"evict m02", "restart_all g2 m01,m03,m04 ckpt 3", "replenish 1"}));
  EXPECT_NE(acts[1].reason.find("continue on 3 of 4 machines"), std::string::npos) << acts[1].reason;
  EXPECT_EQ(job.state().placement.world_size(), 6);
  EXPECT_EQ(job.state().placement.MachineOf(2), "m03");
  job.RunSteps(4, 6, S(40));
  EXPECT_EQ(job.state().job, JobState::kRunning);
  EXPECT_EQ(Briefs(job.Reconcile(S(70))), (Lines{"replenish 1"})) << "running on all it has: no restart";
  // A machine joins: the job takes it once it holds spares of the job, so
  // the three that train stop for the regroup only, not for its start-up.
  EXPECT_EQ(Briefs(job.Do(Joined("s09", true, S(80)))), (Lines{"replenish 1"})) << "s09 has no spare yet";
  acts = job.Do(StandbyReady{"s09", true, "", S(82)});
  EXPECT_EQ(Briefs(acts), (Lines{"activate s09", "restart_all g3 m01,m03,m04,s09 ckpt 6", "replenish 1"}));
  EXPECT_NE(acts[1].reason.find("grow to 4 of 4 machines +s09"), std::string::npos) << acts[1].reason;
  EXPECT_EQ(job.state().placement.world_size(), 8);
  // The incident that narrowed the job records its degraded interval: from
  // its recovery to the first step at full width.
  const Incident& narrowed = job.state().incidents.all().front();
  EXPECT_EQ(narrowed.trained_on, 6);
  EXPECT_FALSE(narrowed.rejoined.has_value()) << "still narrower until a step at full width";
  job.RunSteps(7, 7, S(90));
  ASSERT_TRUE(narrowed.rejoined.has_value());
  EXPECT_EQ(*narrowed.rejoined, S(90));
  EXPECT_EQ(*narrowed.StallDuration(), *narrowed.recovered - S(35));

  Job standby(4, 0);
  standby.StartAndRun(3);
  EXPECT_EQ(Briefs(standby.Do(DeviceFailed("m02", S(35)))), (Lines{"evict m02", "wait 1", "replenish 1"}));
}

// The ring layout rides on the placement (issue 35): a narrowing takes the
// lost machine's ranks out of their group and leaves every other rank's
// group and parts as they were; growing back adds the joiner's ranks.
TEST(Reconcile, AnElasticJobsRingKeepsItsGroupsThroughANarrowingAndAGrowth) {
  Job job(16, 0, PolicyConfig{}, JobSpec::Recovery::kElastic);
  job.StartAndRun(3);
  const RingLayout before = RingLayout::Default(32, 0);
  job.Do(DeviceFailed("m09", S(35)));
  const RingLayout narrow = job.state().placement.ring;
  ASSERT_EQ(narrow.world(), 30);
  ASSERT_TRUE(narrow.Check().ok()) << narrow.Check().ToString();
  for (int r = 0; r < 30; ++r) EXPECT_EQ(narrow.group[r], before.group[r < 16 ? r : r + 2]) << "rank " << r;
  job.RunSteps(4, 6, S(40));
  job.Do(Joined("s09", true, S(80)));
  job.Do(StandbyReady{"s09", true, "", S(82)});
  const RingLayout& grown = job.state().placement.ring;
  ASSERT_EQ(grown.world(), 32);
  EXPECT_TRUE(grown.Check().ok()) << grown.Check().ToString();
  for (int r = 0; r < 30; ++r) EXPECT_EQ(grown.group[r], narrow.group[r]) << "rank " << r;
}

// A standby that never says whether it holds spares is taken after
// standby_ready_wait; one that says it cannot hold any, at once.
TEST(Reconcile, AnElasticJobTakesASilentStandbyAfterTheWait) {
  Job job(3, 0, PolicyConfig{}, JobSpec::Recovery::kElastic);
  job.StartAndRun(3);
  job.Do(DeviceFailed("m02", S(35)));
  job.RunSteps(4, 6, S(40));
  job.Do(Joined("s09", true, S(80)));
  EXPECT_EQ(Briefs(job.Reconcile(S(109))), (Lines{"replenish 1"}));
  EXPECT_EQ(Briefs(job.Reconcile(S(110))), (Lines{"activate s09", "restart_all g3 m01,m03,s09 ckpt 6", "replenish 1"}));

  Job cold(3, 0, PolicyConfig{}, JobSpec::Recovery::kElastic);
  cold.StartAndRun(3);
  cold.Do(DeviceFailed("m02", S(35)));
  cold.RunSteps(4, 6, S(40));
  cold.Do(Joined("s09", true, S(80)));
  EXPECT_EQ(Briefs(cold.Do(StandbyReady{"s09", false, "not bulwark-train", S(81)})),
            (Lines{"activate s09", "restart_all g3 m01,m03,s09 ckpt 6", "replenish 1"}));
}

// Replicas that are pipelines across machines (pp 2: m01 and m02 hold
// stage 0, m03 and m04 stage 1; column c of each stage is one pipeline's
// machines). A standby takes a lost machine's slot, so each survivor keeps
// its stage. With none, the job goes on with its whole pipelines, laid out
// stage by stage again, and the broken pipeline's other machine goes back
// to the pool, from which the job grows by whole pipelines.
TEST(Reconcile, AnElasticPipelineJobGoesOnWithItsWholePipelines) {
  Job job(4, 1, PolicyConfig{}, JobSpec::Recovery::kElastic, Duration(0), 2);
  job.StartAndRun(3);
  EXPECT_EQ(Briefs(job.Do(DeviceFailed("m04", S(35)))),
            (Lines{"evict m04", "activate s01", "restart_all g2 m01,m02,m03,s01 ckpt 3", "replenish 1"}));
  job.RunSteps(4, 6, S(40));
  auto acts = job.Do(DeviceFailed("m02", S(80)));
  EXPECT_EQ(Briefs(acts), (Lines{"evict m02", "restart_all g3 m01,m03 ckpt 6", "replenish 1"}));
  EXPECT_NE(acts[1].reason.find("continue on 2 of 4 machines"), std::string::npos) << acts[1].reason;
  EXPECT_EQ(job.state().FindMachine("s01")->state, MachineState::kStandby) << "its pipeline is broken";
  EXPECT_EQ(job.state().placement.MachineOf(2), "m03") << "m03 still holds stage 1";
  job.RunSteps(7, 9, S(81));
  // One machine is not a pipeline: s09 joins and the job waits for both
  // to hold spares.
  job.Do(Joined("s09", true, S(102)));
  EXPECT_EQ(Briefs(job.Do(StandbyReady{"s09", true, "", S(103)})), (Lines{"replenish 1"}));
  acts = job.Do(StandbyReady{"s01", true, "", S(104)});
  EXPECT_EQ(Briefs(acts), (Lines{"activate s01", "activate s09", "restart_all g4 m01,s01,m03,s09 ckpt 9", "replenish 1"}));
  EXPECT_NE(acts[2].reason.find("grow to 4 of 4 machines +s01 +s09"), std::string::npos) << acts[2].reason;
}

// The same with tensor parallelism inside each machine (tp = ranks_per_machine,
// the simulator's TP 8 x PP 10 layout at 100k GPUs): each machine holds one
// stage's TP group of one pipeline, so a lost machine breaks one pipeline,
// a standby takes its slot, and with none the job goes on with its whole
// pipelines and the broken one's other machine goes back to the pool.
TEST(Reconcile, AnElasticPipelineJobWithTensorParallelMachinesKeepsWholePipelines) {
  Job job(4, 1, PolicyConfig{}, JobSpec::Recovery::kElastic, Duration(0), 2);
  JobSpec spec = job.state().spec;
  spec.tp = 2;  // = ranks_per_machine
  std::vector<MachineId> fleet = {"m01", "m02", "m03", "m04", "s01"};
  Result<Controller> c = Controller::Create(spec, PolicyConfig{}, fleet, S(0));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  job.controller.emplace(std::move(*c));
  job.StartAndRun(3);
  EXPECT_EQ(Briefs(job.Do(DeviceFailed("m04", S(35)))),
            (Lines{"evict m04", "activate s01", "restart_all g2 m01,m02,m03,s01 ckpt 3", "replenish 1"}));
  job.RunSteps(4, 6, S(40));
  auto acts = job.Do(DeviceFailed("m02", S(80)));
  EXPECT_EQ(Briefs(acts), (Lines{"evict m02", "restart_all g3 m01,m03 ckpt 6", "replenish 1"}));
  EXPECT_EQ(job.state().FindMachine("s01")->state, MachineState::kStandby) << "its pipeline is broken";
  EXPECT_EQ(job.state().placement.MachineOf(2), "m03") << "m03 still holds stage 1's TP group";
  EXPECT_EQ(job.state().placement.MachineOf(3), "m03");
}

TEST(Reconcile, AnElasticJobUsesTheStandbysItHasBeforeItNarrows) {
  Job job(4, 1, PolicyConfig{}, JobSpec::Recovery::kElastic);
  job.StartAndRun(3);
  job.Do(DeviceFailed("m02", S(35)));  // s01 takes slot 1
  EXPECT_EQ(job.state().placement.slots, (std::vector<MachineId>{"m01", "s01", "m03", "m04"}));
  job.RunSteps(4, 5, S(40));
  auto acts = job.Do(DeviceFailed("m04", S(60)));
  EXPECT_EQ(Briefs(acts), (Lines{"evict m04", "restart_all g3 m01,s01,m03 ckpt 5", "replenish 1"}));
}

TEST(JobSpec, ElasticRecoveryNeedsReplicasOrStagesThatFitMachines) {
  JobSpec spec{"j", 8, 2, "x"};
  spec.recovery = JobSpec::Recovery::kElastic;
  EXPECT_TRUE(spec.Validate().ok());
  spec.tp = 4;
  EXPECT_NE(spec.Validate().message().find("recovery elastic needs replicas that fit in a machine"), std::string::npos);
  spec.tp = 1;
  spec.pp = 2;  // stages of 4 ranks on 2 machines each: a pipeline spans machines
  EXPECT_TRUE(spec.Validate().ok());
  spec.pp = 8;  // one rank per stage: a machine would hold two stages
  EXPECT_NE(spec.Validate().message().find("needs tp dividing ranks_per_machine and machines that each hold ranks of "
                                          "one stage"),
            std::string::npos);
  spec.pp = 2;
  spec.tp = 2;  // a machine holds one stage's TP group: a lost machine breaks one pipeline
  EXPECT_TRUE(spec.Validate().ok()) << spec.Validate().message();
  spec.tp = 4;  // a TP group spans two machines: a lost machine would break a group of another column
  EXPECT_FALSE(spec.Validate().ok());
  EXPECT_EQ(ParseRecovery("elastic").value(), JobSpec::Recovery::kElastic);
  EXPECT_EQ(ParseRecovery("elastik").status().message(), "recovery 'elastik' is not one of: standby, requeue, elastic");
}

// ---------------------------------------------------------------------------
// Incident timings
// ---------------------------------------------------------------------------

TEST(Incident, EvictionTimingsFromFaultToRecovery) {
  Job job;
  job.StartAndRun(100);  // step 100 at 1000 s
  // m03 went silent at 1003 s; the controller hears of it 30 s later.
  job.Do(HeartbeatLost("m03", S(1003), S(1033)));
  job.Do(Step(91, S(1093)));  // resumed from the checkpoint of step 90
  const Incident& inc = job.LastIncident();
  EXPECT_EQ(inc.fault, S(1003));
  EXPECT_EQ(inc.detected, S(1033));
  EXPECT_EQ(inc.localized, S(1033));
  EXPECT_EQ(inc.decision, S(1033));
  EXPECT_EQ(inc.recovered, S(1093));
  EXPECT_EQ(inc.DetectDuration(), Secs(30));
  EXPECT_EQ(inc.LocalizeDuration(), Secs(0));
  EXPECT_EQ(inc.RecoverDuration(), Secs(60));
  EXPECT_EQ(inc.step_at_fault, 100);
  EXPECT_EQ(inc.restored_step, 90);
  EXPECT_EQ(inc.LostSteps(), 10);
  EXPECT_NE(inc.Summary().find("evicted m03"), std::string::npos) << inc.Summary();

  // Steps 92..100 are recomputed, 101 is new.
  job.RunSteps(92, 101, S(1103));
  TimeBreakdown b = job.controller->Cumulative(S(1193));
  EXPECT_EQ(b.wall, Secs(1193));
  EXPECT_EQ(b.of(TimeCategory::kStartup), Secs(10));
  EXPECT_EQ(b.productive(), Secs(1000));              // steps 2..101, first time
  EXPECT_EQ(b.of(TimeCategory::kRecomputation), Secs(93));  // 3 s lost in flight + 9 steps
  EXPECT_EQ(b.of(TimeCategory::kDetection), Secs(30));
  EXPECT_EQ(b.of(TimeCategory::kRecovery), Secs(60));
  EXPECT_DOUBLE_EQ(b.ettr(), 1000.0 / 1193.0);
}

TEST(Incident, UnknownFaultTimeMeansNoDetectionTime) {
  Job job;
  job.StartAndRun(10);
  job.Do(DeviceFailed("m01", S(104)), S(105));
  const Incident& inc = job.LastIncident();
  EXPECT_FALSE(inc.fault.has_value());
  EXPECT_EQ(inc.DetectDuration(), Secs(0));
  EXPECT_FALSE(inc.LostSteps().has_value());  // not known until the job resumes
}

TEST(Incident, FaultsBeforeRecoveryJoinTheOpenEpisode) {
  Job job;
  job.StartAndRun(10);
  job.Do(DeviceFailed("m01", S(105)));
  job.Do(DeviceFailed("s01", S(130)));  // the replacement dies before the first step
  ASSERT_EQ(job.controller->incidents().size(), 1u);
  EXPECT_EQ(job.LastIncident().evicted, (std::vector<MachineId>{"m01", "s01"}));
  EXPECT_EQ(job.state().placement.slots[0], "s02");
}

}  // namespace
}  // namespace bulwark::controller
