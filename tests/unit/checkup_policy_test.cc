// What is evicted on suspicion comes back (issue 38 item 5,
// policy_checkup.cc): a fail-slow pipeline's machines each get a checkup
// off the job's path; a passed one returns to the pool, a failed or
// partial one stays out for an operator; a machine evicted for a fault of
// its own gets none. Pure: Controller::Handle, no sockets, no sleeps.
#include <gtest/gtest.h>

#include <map>

#include "controller/controller.h"
#include "support/controller_fixture.h"

namespace bulwark::controller {
namespace {

using testing::Briefs;
using testing::Lines;
using testing::S;

// A pipeline job (pp 2) on m01..m04, standbys s01, s02, checkups on:
// pipelines {0,2} on m01,m03 and {1,3} on m02,m04.
struct Job {
  explicit Job(bool checkup = true) {
    JobSpec spec;
    spec.id = "j";
    spec.world_size = 4;
    spec.pp = 2;
    spec.command = "bulwark-train";
    PolicyConfig policy;
    policy.checkup_evicted = checkup;
    auto c = Controller::Create(spec, policy, {"m01", "m02", "m03", "m04", "s01", "s02"}, S(0));
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
  // m04 computes slowly: its pipeline, m02 and m04, is over-evicted.
  Lines SlowM04() {
    return Do(FailSlowSuspected{"m04", 5, 2.1, "m04 computes 2.10x the others' time per step (5/5 rounds)", S(60)});
  }
  const MachineStatus& Machine(const MachineId& m) const { return *controller->state().FindMachine(m); }
  std::optional<Controller> controller;
};

DiagnosticsReported Answer(const MachineId& m, int64_t incident, bool device_passed, double at) {
  DiagnosticsReported r{incident, m, {}, "", S(at)};
  r.results = {{"compute", true, "", 900}, {"device", device_passed, device_passed ? "" : "HBM ECC errors", 40},
               {"alignment", true, "", 300}};
  return r;
}

TEST(Checkup, EachMachineOverEvictedOnSuspicionIsCheckedOffTheJobsPath) {
  Job j;
  EXPECT_EQ(j.SlowM04(), (Lines{"evict m02", "checkup m02 i1", "evict m04", "checkup m04 i1", "activate s01",
                                "activate s02", "restart_all g2 m01,s01,m03,s02 ckpt 0", "replenish 1"}));
  EXPECT_EQ(j.Machine("m02").checkup, 1);
  EXPECT_EQ(j.Machine("m04").checkup, 1);
}

TEST(Checkup, APassedCheckupReturnsTheMachineToThePoolAndAFailedOneKeepsItOut) {
  Job j;
  j.SlowM04();
  // Off the job's path: the job goes on training, and no restart follows.
  EXPECT_EQ(j.Do(Answer("m02", 1, /*device_passed=*/true, 180)), (Lines{}));
  EXPECT_EQ(j.Machine("m02").state, MachineState::kStandby);
  EXPECT_NE(j.Machine("m02").last_reason.find("checkup passed"), std::string::npos) << j.Machine("m02").last_reason;
  EXPECT_EQ(j.Do(Answer("m04", 1, /*device_passed=*/false, 181)), (Lines{}));
  EXPECT_EQ(j.Machine("m04").state, MachineState::kEvicted);
  EXPECT_NE(j.Machine("m04").last_reason.find("HBM ECC errors"), std::string::npos) << j.Machine("m04").last_reason;
  EXPECT_EQ(j.controller->state().checkups_passed, 1);
  EXPECT_EQ(j.controller->state().checkups_failed, 1);
  // A repeated answer changes nothing: the checkup is over.
  EXPECT_EQ(j.Do(Answer("m04", 1, true, 182)), (Lines{}));
  EXPECT_EQ(j.Machine("m04").state, MachineState::kEvicted);
}

TEST(Checkup, AReturnedMachineServesTheJobAtTheNextFault) {
  Job j;
  j.SlowM04();
  j.Do(Answer("m02", 1, true, 180));
  j.Do(Answer("m04", 1, true, 180));
  // The pool is m02, m04 again; m01's GPU fails and one of them takes its slot.
  const Lines acts = j.Do(InspectionFailed{"m01", InspectionKind::kDevice, "GPU fell off the bus", S(300)});
  ASSERT_GE(acts.size(), 3u);
  EXPECT_EQ(acts[0], "evict m01") << "a machine evicted for its own fault gets no checkup";
  EXPECT_EQ(acts[1], "activate m02");
  EXPECT_EQ(j.Machine("m01").checkup, 0);
}

TEST(Checkup, ATestMissingFromTheAnswerKeepsTheMachineOut) {
  Job j;
  j.SlowM04();
  DiagnosticsReported partial{1, "m02", {{"compute", true, "", 900}}, "", S(180)};
  j.Do(partial);
  EXPECT_EQ(j.Machine("m02").state, MachineState::kEvicted);
  EXPECT_NE(j.Machine("m02").last_reason.find("device: no answer"), std::string::npos) << j.Machine("m02").last_reason;
}

TEST(Checkup, OnByDefault) { EXPECT_TRUE(PolicyConfig{}.checkup_evicted); }

TEST(Checkup, TurnedOffNoMachineIsCheckedAndNoneReturns) {
  Job j(/*checkup=*/false);
  EXPECT_EQ(j.SlowM04(), (Lines{"evict m02", "evict m04", "activate s01", "activate s02",
                                "restart_all g2 m01,s01,m03,s02 ckpt 0", "replenish 1"}));
  j.Do(Answer("m02", 1, true, 180));
  EXPECT_EQ(j.Machine("m02").state, MachineState::kEvicted);
}

// A rack's machines after its switch returns are checked too (issue 38
// item 5, PolicyConfig::checkup_domain_return), when the rack's loss was
// an incident: the switch r1 takes m03
// (placed, pp 1 job of two ranks on m01 and m03) and s02 (a standby).
TEST(Checkup, ARacksMachinesAreCheckedBeforeTheyServeAgain) {
  JobSpec spec;
  spec.id = "j";
  spec.world_size = 2;
  spec.command = "bulwark-train";
  PolicyConfig policy;
  policy.checkup_evicted = true;
  policy.checkup_domain_return = true;
  const std::vector<MachineId> ids = {"m01", "m03", "s01", "s02"};
  const std::map<MachineId, std::string> racks = {{"m01", "r0"}, {"s01", "r0"}, {"m03", "r1"}, {"s02", "r1"}};
  auto c = Controller::Create(spec, policy, ids, S(0), racks);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(c->Reconcile(S(0)).ok());
  ASSERT_EQ(c->state().placement.slots, (std::vector<MachineId>{"m01", "m03"}));
  std::vector<std::pair<size_t, Status>> refused;
  ASSERT_TRUE(c->HandleAll({MachineHeartbeatLost{"m03", S(100), S(110)}, MachineHeartbeatLost{"s02", S(100), S(110)}},
                           S(110), &refused)
                  .ok());
  ASSERT_TRUE(refused.empty());
  ASSERT_EQ(c->incidents().back().domain, "r1");
  const int64_t incident = c->incidents().back().id;
  for (const MachineId m : {"m03", "s02"}) {
    MachineJoined back{m, true, "switch repaired", S(7300)};
    back.domain = "r1";
    Result<std::vector<Action>> acts = c->Handle(back, S(7300));
    ASSERT_TRUE(acts.ok()) << acts.status().ToString();
    EXPECT_EQ(Briefs(*acts), (Lines{"checkup " + m + " i" + std::to_string(incident)}));
    EXPECT_EQ(c->state().FindMachine(m)->state, MachineState::kEvicted) << "not before its checkup";
  }
  DiagnosticsReported ok{incident, "m03", {{"compute", true, "", 1}, {"device", true, "", 1}, {"alignment", true, "", 1}},
                         "", S(7420)};
  ASSERT_TRUE(c->Handle(ok, S(7420)).ok());
  EXPECT_EQ(c->state().FindMachine("m03")->state, MachineState::kStandby);
}

// A machine out for its checkup is still in its rack (issue 38): when the
// switch takes the rack, its loss and its rack-mate's are one burst, not a
// machine fault of the rack-mate's, and its checkup, cut short, runs again
// when it registers. r0 holds m01, r1 m03 and the standby s02; m03, slow,
// is over-evicted at 60 s and s02 takes its slot; the switch r1 goes down
// at 100 s.
TEST(Checkup, AMachineOutForItsCheckupIsLostWithItsRackAndCheckedWhenItReturns) {
  JobSpec spec;
  spec.id = "j";
  spec.world_size = 2;
  spec.command = "bulwark-train";
  const std::map<MachineId, std::string> racks = {{"m01", "r0"}, {"m03", "r1"}, {"s02", "r1"}};
  auto c = Controller::Create(spec, PolicyConfig{}, {"m01", "m03", "s02"}, S(0), racks);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(c->Reconcile(S(0)).ok());
  for (int k = 1; k <= 10; ++k) ASSERT_TRUE(c->Handle(StepCompleted{k, S(k)}, S(k)).ok());
  Result<std::vector<Action>> slow =
      c->Handle(FailSlowSuspected{"m03", 5, 2.1, "m03 computes 2.10x the others' time per step (5/5 rounds)", S(60)}, S(60));
  ASSERT_TRUE(slow.ok()) << slow.status().ToString();
  const int64_t suspicion = c->state().FindMachine("m03")->checkup;
  ASSERT_NE(suspicion, 0);
  ASSERT_EQ(c->state().placement.slots, (std::vector<MachineId>{"m01", "s02"})) << ::testing::PrintToString(Briefs(*slow));
  std::vector<std::pair<size_t, Status>> refused;
  ASSERT_TRUE(c->HandleAll({MachineHeartbeatLost{"m03", S(100), S(110)}, MachineHeartbeatLost{"s02", S(100), S(110)}},
                           S(110), &refused)
                  .ok());
  ASSERT_TRUE(refused.empty());
  const Incident& inc = c->incidents().back();
  EXPECT_EQ(inc.domain, "r1") << inc.cause;
  EXPECT_EQ(inc.cause, "switch r1: 2 machines lost");
  EXPECT_TRUE(c->state().FindMachine("s02")->lost_with_domain) << c->state().FindMachine("s02")->last_reason;
  EXPECT_TRUE(c->state().FindMachine("m03")->lost_with_domain);
  // Back after the repair: s02 returns on its self-check (a rack's return
  // is checked only with checkup_domain_return) and the job, waiting for a
  // machine since the switch took its standby, takes it at once; m03 is
  // checked again for its own suspicion before it serves.
  MachineJoined s02{"s02", true, "switch repaired", S(7300)};
  s02.domain = "r1";
  ASSERT_TRUE(c->Handle(s02, S(7300)).ok());
  EXPECT_EQ(c->state().FindMachine("s02")->state, MachineState::kActive);
  MachineJoined m03{"m03", true, "switch repaired", S(7300)};
  m03.domain = "r1";
  Result<std::vector<Action>> acts = c->Handle(m03, S(7300));
  ASSERT_TRUE(acts.ok()) << acts.status().ToString();
  EXPECT_EQ(Briefs(*acts), (Lines{"checkup m03 i" + std::to_string(suspicion)}));
  EXPECT_EQ(c->state().FindMachine("m03")->state, MachineState::kEvicted) << "not before its checkup";
  DiagnosticsReported ok{suspicion, "m03", {{"compute", true, "", 1}, {"device", true, "", 1}, {"alignment", true, "", 1}},
                         "", S(7420)};
  ASSERT_TRUE(c->Handle(ok, S(7420)).ok());
  EXPECT_EQ(c->state().FindMachine("m03")->state, MachineState::kStandby);
}

}  // namespace
}  // namespace bulwark::controller
