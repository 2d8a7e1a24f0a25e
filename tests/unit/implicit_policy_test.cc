// The policy's rules for implicit faults, pure: a hang's stack capture and
// verdict, NaN and spikes with and without a culprit, fail-slow over-eviction,
// user-code errors. Driven through Controller::Handle; no sockets, no sleeps.
#include <gtest/gtest.h>

#include "controller/controller.h"
#include "support/controller_fixture.h"

namespace bulwark::controller {
namespace {

using testing::Briefs;
using testing::Lines;
using testing::S;
using testing::Secs;

// A data-parallel job on m01..m04 (one rank each) with standbys s01, s02,
// or a pipeline job with `pp`.
struct Job {
  explicit Job(int pp = 1) {
    JobSpec spec;
    spec.id = "j";
    spec.world_size = 4;
    spec.pp = pp;
    spec.command = "bulwark-train";
    auto c = Controller::Create(spec, PolicyConfig{}, {"m01", "m02", "m03", "m04", "s01", "s02"}, S(0));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    controller.emplace(std::move(*c));
    EXPECT_TRUE(controller->Reconcile(S(0)).ok());
    for (int k = 1; k <= 10; ++k) Do(StepCompleted{k, S(k)});
  }
  Lines Do(const Event& e) {
    auto r = controller->Handle(e, ObservedAt(e));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? Briefs(*r) : Lines{};
  }
  const Incident& Last() const { return controller->incidents().back(); }
  std::optional<Controller> controller;
};

TEST(ImplicitPolicy, AHangCapturesStacksThenOverEvictsTheOutliers) {
  Job j;
  HangSuspected h{10, S(10), Secs(2), false, S(12.1)};
  EXPECT_EQ(j.Do(h), (Lines{"trace i1"}));
  EXPECT_EQ(j.Last().cls, IncidentClass::kImplicit);
  EXPECT_FALSE(j.Last().localized.has_value()) << "not localized until the stacks are in";
  EXPECT_EQ(j.Last().fault, S(10));

  StacksAnalyzed a;
  a.incident = 1;
  a.groups = {{3, "wait < main", {0, 1, 3}}, {1, "spin < main", {2}}};
  a.suspects = {"m03"};
  a.why = "outlier rank(s) {2}";
  a.observed = S(12.4);
  EXPECT_EQ(j.Do(a), (Lines{"evict m03", "checkup m03 i1", "activate s01", "restart_all g2 m01,m02,s01,m04 ckpt 0"}));
  const Incident& inc = j.Last();
  EXPECT_EQ(inc.resolution, Resolution::kEvictedAndReplaced);
  EXPECT_EQ(inc.localized, S(12.4));
  EXPECT_EQ(inc.stacks.groups.size(), 2u);
  EXPECT_EQ(inc.evicted, (std::vector<MachineId>{"m03"}));
}

TEST(ImplicitPolicy, NoOutlierReattemptsAndStaleVerdictsAreIgnored) {
  Job j;
  j.Do(HangSuspected{10, S(10), Secs(2), false, S(12.1)});
  StacksAnalyzed stale;
  stale.incident = 7;  // some other episode's
  stale.observed = S(12.2);
  EXPECT_TRUE(j.Do(stale).empty());
  StacksAnalyzed a;
  a.incident = 1;
  a.why = "all 4 ranks wait in the same place";
  a.observed = S(12.4);
  EXPECT_EQ(j.Do(a), (Lines{"restart_all g2 m01,m02,m03,m04 ckpt 0"}));
  EXPECT_EQ(j.Last().resolution, Resolution::kReattempt);
}

// A machine that dies takes as long to be missed (heartbeat timeout) as a
// hang takes to be suspected (hang floor): when its silence evicts it while
// the stacks are being taken, the survivors' stacks (all waiting on it)
// arrive for a generation already restarted and must not over-evict them.
TEST(ImplicitPolicy, StacksOfAGenerationAnEvictionRestartedAreKeptNotActedOn) {
  Job j;
  EXPECT_EQ(j.Do(HangSuspected{10, S(10), Secs(2), false, S(12.1)}), (Lines{"trace i1"}));
  EXPECT_EQ(j.Do(MachineHeartbeatLost{"m03", S(10), S(12.2)}),
            (Lines{"evict m03", "activate s01", "restart_all g2 m01,m02,s01,m04 ckpt 0"}));
  StacksAnalyzed a;
  a.incident = 1;
  a.generation = 1;  // captured before the restart
  a.groups = {{3, "wait < main", {0, 1, 3}}};
  a.missing = {2};
  a.suspects = {"m01", "m02"};
  a.why = "outliers";
  a.observed = S(13.1);
  EXPECT_TRUE(j.Do(a).empty());
  const Incident& inc = j.Last();
  EXPECT_EQ(inc.evicted, (std::vector<MachineId>{"m03"}));
  EXPECT_EQ(inc.resolution, Resolution::kEvictedAndReplaced);
  EXPECT_EQ(inc.stacks.groups.size(), 1u) << "kept for people";
  ASSERT_FALSE(inc.notes.empty());
  EXPECT_NE(inc.notes.back().find("after the restart"), std::string::npos) << inc.notes.back();
}

TEST(ImplicitPolicy, NanCulpritIsEvictedNoCulpritReattemptsAndARepeatClimbsTheLadder) {
  Job j;
  TrainingAnomaly nan;
  nan.step = 11;
  nan.kind = "nan";
  nan.culprits = {"m02"};
  nan.culprit_ranks = {1};
  nan.at = S(11);
  nan.observed = S(11.2);
  EXPECT_EQ(j.Do(nan), (Lines{"evict m02", "checkup m02 i1", "activate s01", "restart_all g2 m01,s01,m03,m04 ckpt 0"}));
  EXPECT_EQ(j.Last().fault, S(11));
  j.Do(StepCompleted{11, S(15)});

  TrainingAnomaly spike;
  spike.step = 20;
  spike.kind = "spike";
  spike.at = S(20);
  spike.observed = S(20.5);
  EXPECT_EQ(j.Do(spike), (Lines{"restart_all g3 m01,s01,m03,m04 ckpt 0"}));
  EXPECT_EQ(j.Last().resolution, Resolution::kReattempt);
  ASSERT_FALSE(j.Last().notes.empty());
  j.Do(StepCompleted{19, S(24)});
  spike.at = S(25);
  spike.observed = S(25.5);
  // The same step again: deterministic on these machines, a data or model
  // fault or a machine corrupting silently; the stop-time ladder tells
  // (tests/unit/ladder_test.cc climbs it to the end).
  EXPECT_EQ(j.Do(spike), (Lines{"diagnose i3 compute,device,alignment"}));
  EXPECT_TRUE(j.Last().evicted.empty());
}

TEST(ImplicitPolicy, FailSlowOverEvictsThePipelineAndAJobWideSlowdownNothing) {
  Job j(/*pp=*/2);  // rank = dp + 2 * pp: pipelines {0,2} on m01,m03 and {1,3} on m02,m04
  FailSlowSuspected jobwide{"", 1, 2.0, "job-wide slowdown: every machine computes 2.00x", S(20)};
  EXPECT_TRUE(j.Do(jobwide).empty());
  EXPECT_TRUE(j.controller->incidents().empty());
  ASSERT_EQ(j.controller->state().notes.size(), 1u);

  FailSlowSuspected slow{"m04", 5, 2.1, "m04 computes 2.10x the others' time per step (5/5 rounds)", S(60)};
  EXPECT_EQ(j.Do(slow), (Lines{"evict m02", "checkup m02 i1", "evict m04", "checkup m04 i1", "activate s01",
                               "activate s02", "restart_all g2 m01,s01,m03,s02 ckpt 0", "replenish 1"}));
  EXPECT_NE(j.Last().why.find("pp group {1,3}"), std::string::npos) << j.Last().why;
}

TEST(ImplicitPolicy, AMissingCommandStopsTheJobAndEvictsNoMachine) {
  JobSpec spec;
  spec.id = "typo";
  spec.world_size = 1;
  spec.command = "bulwark-trian";
  auto c = Controller::Create(spec, PolicyConfig{}, {"m01", "s01"}, S(0));
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c->Reconcile(S(0)).ok());
  auto first = c->Handle(RankExited{"m01", 0, 127, 0, "command_not_found", S(1)}, S(1));
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(Briefs(*first), (Lines{"restart_all g2 m01 ckpt 0"}));
  auto second = c->Handle(RankExited{"m01", 0, 127, 0, "command_not_found", S(3)}, S(3));
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(Briefs(*second), (Lines{"stop"}));
  EXPECT_TRUE(c->incidents().back().evicted.empty());
  EXPECT_NE(c->incidents().back().why.find("not a machine"), std::string::npos);
  EXPECT_EQ(c->state().FindMachine("m01")->state, MachineState::kActive);
}

// The hang of rank 2 (on m03) at step 11; the others wait for it.
StacksAnalyzed HangOfRank2(int64_t incident, int64_t generation, const MachineId& on, double at) {
  StacksAnalyzed a;
  a.incident = incident;
  a.generation = generation;
  a.groups = {{3, "wait < main", {0, 1, 3}}, {1, "deadlock < main", {2}}};
  a.suspects = {on};
  a.why = "outlier rank(s) {2}";
  a.observed = S(at);
  return a;
}

TEST(ImplicitPolicy, AHangThatFollowsTheRankToItsReplacementStopsTheJobAfterOneEviction) {
  Job j;
  EXPECT_EQ(j.Do(HangSuspected{10, S(10), Secs(2), false, S(12.1)}), (Lines{"trace i1"}));
  EXPECT_EQ(j.Do(HangOfRank2(1, 1, "m03", 12.4)), (Lines{"evict m03", "checkup m03 i1", "activate s01",
                                                          "restart_all g2 m01,m02,s01,m04 ckpt 0"}));
  // The restart replays from the start (no checkpoint): steps 1..10 again,
  // then rank 2, now on s01, blocks at the very same step.
  for (int k = 1; k <= 10; ++k) j.Do(StepCompleted{k, S(20 + k)});
  EXPECT_EQ(j.Do(HangSuspected{10, S(30), Secs(2), false, S(32.1)}), (Lines{"trace i2"}));
  EXPECT_EQ(j.Do(HangOfRank2(2, 2, "s01", 32.4)), (Lines{"stop"}));
  const Incident& inc = j.Last();
  EXPECT_EQ(inc.resolution, Resolution::kStopped);
  EXPECT_TRUE(inc.evicted.empty());
  EXPECT_NE(inc.why.find("follows the job, not the machine"), std::string::npos) << inc.why;
  EXPECT_NE(inc.why.find("replaced m03"), std::string::npos) << inc.why;
  EXPECT_EQ(j.controller->state().machines.at("s02").state, MachineState::kStandby) << "the pool is kept";
}

TEST(ImplicitPolicy, AHangAtAnotherStepOnTheReplacementIsANewFaultAndEvicts) {
  Job j;
  j.Do(HangSuspected{10, S(10), Secs(2), false, S(12.1)});
  j.Do(HangOfRank2(1, 1, "m03", 12.4));
  for (int k = 1; k <= 15; ++k) j.Do(StepCompleted{k, S(20 + k)});  // step 11 completed this time
  j.Do(HangSuspected{15, S(35), Secs(2), false, S(37.1)});
  EXPECT_EQ(j.Do(HangOfRank2(2, 2, "s01", 37.4)), (Lines{"evict s01", "checkup s01 i2", "activate s02",
                                                          "restart_all g3 m01,m02,s02,m04 ckpt 0", "replenish 1"}));
}

TEST(ImplicitPolicy, AGroupLargerThanThePoolIsNarrowedToTheStuckRanksMachine) {
  Job j(/*pp=*/2);  // pipelines {0,2} on m01,m03 and {1,3} on m02,m04
  // One standby only: the pipeline of m03 holds two machines.
  j.Do(MachineJoined{"s02", false, "EUD found a bad GPU", S(10.5)});
  j.Do(HangSuspected{10, S(10), Secs(2), false, S(12.1)});
  StacksAnalyzed a;
  a.incident = 1;
  a.generation = 1;
  // The all-reduce majority, rank 0 waiting in recv for rank 2, rank 2 stuck.
  a.groups = {{2, "allreduce < main", {1, 3}}, {1, "recv < main", {0}}, {1, "spin < main", {2}}};
  a.group = "pp group {0,2}";
  a.suspects = {"m01", "m03"};
  a.why = "outlier rank(s) {0,2}";
  a.observed = S(12.4);
  EXPECT_EQ(j.Do(a), (Lines{"evict m03", "checkup m03 i1", "activate s01", "restart_all g2 m01,m02,s01,m04 ckpt 0",
                            "replenish 1"}));
  const Incident& inc = j.Last();
  ASSERT_FALSE(inc.notes.empty());
  EXPECT_NE(inc.notes.back().find("under watch: m01"), std::string::npos) << inc.notes.back();
}

TEST(ImplicitPolicy, AMachineReplacingASlowOneAndSlowTheSameWayIsNotEvicted) {
  Job j;
  FailSlowSuspected slow{"m04", 5, 2.1, "m04 computes 2.10x the others' time per step (5/5 rounds)", S(60)};
  EXPECT_EQ(j.Do(slow)[0], "evict m04");
  j.Do(StepCompleted{11, S(70)});
  FailSlowSuspected again{"s01", 5, 2.1, "s01 computes 2.10x the others' time per step (5/5 rounds)", S(130)};
  EXPECT_TRUE(j.Do(again).empty());
  EXPECT_NE(j.controller->state().notes.back().find("follows the rank"), std::string::npos)
      << j.controller->state().notes.back();
}

}  // namespace
}  // namespace bulwark::controller
