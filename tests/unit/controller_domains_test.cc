// Failure domains in the pure policy (issue 38 item 2, policy_domains.cc):
// a burst of machine losses under one switch is one incident that names the
// switch, counts toward no crash loop, evicts nothing outside the domain,
// and the domain's machines come back when the switch does (with a
// probation: a second loss soon after is a flapping switch).
//
// The fixture's job is 4 machines (m01..m04, 2 ranks each) with standbys
// s01..s04; step k completes at 10k s. Racks: r0 = m01 m02 s01,
// r1 = m03 m04 s02, r2 = s03 s04. Agents say their rack when they register
// (MachineJoined::domain), which is how the plane would hand it over.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "controller/domain_placement.h"
#include "support/controller_fixture.h"

namespace bulwark::controller {
namespace {

using testing::Briefs;
using testing::Crash;
using testing::HeartbeatLost;
using testing::Job;
using testing::Lines;
using testing::S;
using testing::Step;

Event Registered(const MachineId& m, const std::string& domain, Time at, bool passed = true) {
  MachineJoined j{m, passed, passed ? "" : "bad GPU", at};
  j.domain = domain;
  return j;
}

// A rank of `m` that lost its peer on `peer` (bulwark-train names the
// address it could not reach; the plane resolves it to a machine).
Event PeerLost(const MachineId& m, const MachineId& peer, const std::string& signature, Time at) {
  RankExited x{m, 0, 1, 0, signature, at};
  x.unreachable = peer;
  return x;
}

struct RackedJob : Job {
  explicit RackedJob(PolicyConfig config = {}) : Job(4, 4, config) {
    const std::pair<const char*, const char*> racks[] = {{"m01", "r0"}, {"m02", "r0"}, {"s01", "r0"},
                                                         {"m03", "r1"}, {"m04", "r1"}, {"s02", "r1"},
                                                         {"s03", "r2"}, {"s04", "r2"}};
    for (const auto& [m, r] : racks) Do(Registered(m, r, S(0)));
  }
  int Incidents() const { return static_cast<int>(controller->incidents().size()); }
  // Every machine of the rack goes silent at `at`; their heartbeat
  // timeouts end in the same tick of the plane, which hands them over as
  // one decision (Controller::HandleAll), as the simulator does.
  std::vector<Action> SwitchDown(const std::string& rack, double at) {
    std::vector<Event> lost;
    for (const auto& [id, m] : state().machines) {
      if (m.domain == rack && m.state != MachineState::kEvicted) lost.push_back(HeartbeatLost(id, S(at), S(at + 10)));
    }
    std::vector<std::pair<size_t, Status>> refused;
    Result<std::vector<Action>> acts = controller->HandleAll(lost, S(at + 10), &refused);
    EXPECT_TRUE(acts.ok() && refused.empty());
    return acts.ok() ? *acts : std::vector<Action>{};
  }
};

TEST(Domains, ABurstInOneRackIsOneIncidentThatNamesTheSwitch) {
  RackedJob job;
  job.StartAndRun(10);
  auto acts = job.SwitchDown("r1", 101);
  EXPECT_EQ(job.Incidents(), 1);
  const Incident& inc = job.LastIncident();
  EXPECT_EQ(inc.domain, "r1");
  EXPECT_EQ(inc.cause, "switch r1: 3 machines lost");
  EXPECT_EQ(inc.domain_lost, 3);
  EXPECT_EQ(inc.evicted, (std::vector<MachineId>{"m03", "m04"}));  // s02 was a standby: no slot of the job
  // Nothing outside r1 is evicted; the standbys of r0 and r2 take the slots.
  for (const char* m : {"m01", "m02", "s01", "s03"}) EXPECT_EQ(job.StateOf(m), MachineState::kActive) << m;
  EXPECT_EQ(job.StateOf("s04"), MachineState::kStandby);
  for (const char* m : {"m03", "m04", "s02"}) EXPECT_EQ(job.StateOf(m), MachineState::kEvicted) << m;
  EXPECT_EQ(Briefs(acts).back(), "restart_all g2 m01,m02,s01,s03 ckpt 10");
  job.Do(Step(11, S(160)));
  EXPECT_TRUE(job.LastIncident().closed);
  EXPECT_EQ(job.Incidents(), 1);
}

TEST(Domains, LossesReportedOneByOneTakeNoStandbyOfTheRackThatIsDown) {
  RackedJob job;
  job.StartAndRun(10);
  // m03's timeout ends first: a machine fault like any other, for now.
  EXPECT_EQ(Briefs(job.Do(HeartbeatLost("m03", S(101), S(111)))),
            (Lines{"evict m03", "activate s01", "restart_all g2 m01,m02,s01,m04 ckpt 10"}));
  // m04's, a second later: the burst. The switch's incident takes m03 in,
  // and s02, a standby under the same switch, is passed over.
  EXPECT_EQ(Briefs(job.Do(HeartbeatLost("m04", S(101.5), S(112)))),
            (Lines{"evict m04", "activate s03", "restart_all g3 m01,m02,s01,s03 ckpt 10"}));
  EXPECT_EQ(job.LastIncident().cause, "switch r1: 2 machines lost");
  EXPECT_EQ(Briefs(job.Do(HeartbeatLost("s02", S(101.5), S(112.5)))), (Lines{"evict s02"}));
  EXPECT_EQ(job.LastIncident().cause, "switch r1: 3 machines lost");
  EXPECT_EQ(job.Incidents(), 1);
  EXPECT_TRUE(job.state().FindMachine("m03")->lost_with_domain);
}

TEST(Domains, PeersLostToTheSwitchCountTowardNoCrashLoopAndEvictNothing) {
  PolicyConfig config;
  config.max_crashes_without_progress = 2;
  RackedJob job(config);
  job.StartAndRun(10);
  job.SwitchDown("r1", 101);
  // Every rank of the survivors that talked to r1 exits: code errors by
  // their look ("exception", exit 1), but each names a machine of r1, or
  // is a peer-lost exit. Without the domain these would be a crash loop
  // (2 without progress) or the same failure on several machines.
  for (double t : {112.0, 112.5, 113.0}) {
    job.Do(PeerLost("m01", "m03", "exception", S(t)));
    job.Do(PeerLost("m02", "m04", "exception", S(t)));
    job.Do(Crash("s01", "connection_reset", S(t)));
  }
  EXPECT_TRUE(job.state().crashes.empty());
  EXPECT_NE(job.state().job, JobState::kStopped);
  EXPECT_EQ(job.Incidents(), 1);
  for (const char* m : {"m01", "m02", "s01", "s03"}) EXPECT_EQ(job.StateOf(m), MachineState::kActive) << m;
  EXPECT_GE(job.LastIncident().notes.size(), 9u);  // each exit noted on the switch's incident
  job.Do(Step(11, S(160)));
  EXPECT_EQ(job.state().job, JobState::kRunning);
}

// The generation that answered the switch fails too (on a real cluster:
// it did not form): its peer-lost exits are still no crash, but they are
// reattempted in place. Absorbed with no restart, they left the job
// waiting with no ranks until the switch came back.
TEST(Domains, APeerLostExitOfTheGenerationAfterTheSwitchIsReattempted) {
  PolicyConfig config;
  config.max_crashes_without_progress = 2;
  RackedJob job(config);
  job.StartAndRun(10);
  job.SwitchDown("r1", 101);
  const int64_t gen = job.state().placement.generation;
  std::vector<Action> acts = job.Do(PeerLost("m01", "m03", "connection_reset", S(125)));
  EXPECT_TRUE(job.state().crashes.empty());
  EXPECT_EQ(job.state().placement.generation, gen + 1) << ::testing::PrintToString(Briefs(acts));
  EXPECT_EQ(job.Incidents(), 1);
  for (const char* m : {"m01", "m02", "s01"}) EXPECT_NE(job.StateOf(m), MachineState::kEvicted) << m;
}

TEST(Domains, OneMachineLostInARackIsAMachineFault) {
  RackedJob job;
  job.StartAndRun(10);
  job.Do(HeartbeatLost("m03", S(101), S(111)));
  EXPECT_TRUE(job.LastIncident().domain.empty());
  EXPECT_EQ(job.StateOf("m04"), MachineState::kActive);
  // It does not come back by registering: only an operator returns it.
  EXPECT_FALSE(job.controller->Handle(Registered("m03", "r1", S(500)), S(500)).ok());
}

TEST(Domains, TheRacksMachinesReturnWhenTheSwitchDoesAndAFlapWithinProbationKeepsThemOut) {
  RackedJob job;
  job.StartAndRun(10);
  job.SwitchDown("r1", 101);
  job.Do(Step(11, S(160)));
  // The switch is repaired 2 h later: each agent registers again and passes
  // its self-check; the machines are standbys again, with no operator.
  for (const char* m : {"m03", "m04", "s02"}) {
    job.Do(Registered(m, "r1", S(7400)));
    EXPECT_EQ(job.StateOf(m), MachineState::kStandby) << m;
  }
  EXPECT_EQ(job.state().FindMachine("m03")->last_reason.rfind("switch r1 back", 0), 0u);
  // A machine whose self-check fails after the return stays out.
  // The switch goes again within its probation (1 h): flapping.
  job.SwitchDown("r1", 7500);
  for (const char* m : {"m03", "m04", "s02"}) EXPECT_EQ(job.StateOf(m), MachineState::kEvicted) << m;
  EXPECT_FALSE(job.controller->Handle(Registered("m03", "r1", S(9000)), S(9000)).ok());
  // An operator who fixed the switch returns them.
  job.Do(testing::Returned("m03", S(9100)));
  job.Do(Registered("m03", "r1", S(9101)));
  EXPECT_EQ(job.StateOf("m03"), MachineState::kStandby);
}

TEST(Domains, AReturnAfterTheProbationIsNoFlap) {
  RackedJob job;
  job.StartAndRun(10);
  job.SwitchDown("r1", 101);
  job.Do(Step(11, S(160)));
  for (const char* m : {"m03", "m04", "s02"}) job.Do(Registered(m, "r1", S(1000)));
  job.SwitchDown("r1", 1000 + 3600 + 60);
  EXPECT_TRUE(job.state().FindMachine("m03")->lost_with_domain);
  job.Do(Registered("m03", "r1", S(9000)));
  EXPECT_EQ(job.StateOf("m03"), MachineState::kStandby);
}

TEST(Domains, AFailedSelfCheckAfterTheSwitchReturnsKeepsTheMachineOut) {
  RackedJob job;
  job.StartAndRun(10);
  job.SwitchDown("r1", 101);
  job.Do(Registered("m03", "r1", S(7400), /*passed=*/false));
  EXPECT_EQ(job.StateOf("m03"), MachineState::kEvicted);
  EXPECT_FALSE(job.state().FindMachine("m03")->lost_with_domain);
}

TEST(Domains, WithTheRuleOffEachLossIsItsOwnFault) {
  PolicyConfig config;
  config.domain_burst_machines = 0;
  RackedJob job(config);
  job.StartAndRun(10);
  job.SwitchDown("r1", 101);
  EXPECT_TRUE(job.LastIncident().domain.empty());
  EXPECT_FALSE(job.controller->Handle(Registered("m03", "r1", S(7400)), S(7400)).ok());
}

// ---------------------------------------------------------------------------
// Placement across domains (domain_placement.h)
// ---------------------------------------------------------------------------

// `racks` racks of `per` machines, "m<rack><i>" in rack order.
std::vector<std::pair<MachineId, std::string>> Racks(int racks, int per) {
  std::vector<std::pair<MachineId, std::string>> pool;
  for (int r = 0; r < racks; ++r) {
    for (int i = 0; i < per; ++i) pool.push_back({"m" + std::to_string(r) + std::to_string(i), "r" + std::to_string(r)});
  }
  return pool;
}
std::string RackOf(const MachineId& m) { return "r" + m.substr(1, 1); }

TEST(DomainPlacement, AReplicaFitsUnderOneSwitchAndEachSwitchTakesOneReplica) {
  // 4 racks of 4 machines and one of 2: 4 replicas of 4 stages (16 slots), 2 standbys.
  auto pool = Racks(4, 4);
  pool.push_back({"m40", "r4"});
  pool.push_back({"m41", "r4"});
  std::vector<MachineId> reserve;
  const std::vector<MachineId> slots = DomainAwareSlots(pool, 16, 4, &reserve);
  ASSERT_EQ(slots.size(), 16u);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(ReplicasInDomain(slots, 4, "r" + std::to_string(r), RackOf), 1) << r;
  EXPECT_EQ(reserve, (std::vector<MachineId>{"m41", "m40"}));  // the rack that holds no whole replica
  // Slot s x 4 + c holds stage s of replica c: replica 0 is m00..m03.
  EXPECT_EQ(slots[0], "m00");
  EXPECT_EQ(slots[4], "m01");
  EXPECT_EQ(slots[1], "m10");
}

TEST(DomainPlacement, InIdOrderEachSwitchTakesOneStageOfManyReplicas) {
  // What a blind placement does: slots in id order put one stage of 4
  // replicas under each switch.
  std::vector<MachineId> blind;
  for (const auto& [m, d] : Racks(4, 4)) blind.push_back(m);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(ReplicasInDomain(blind, 4, "r" + std::to_string(r), RackOf), 4) << r;
}

TEST(DomainPlacement, StandbysAreSpreadOverTheDomainsWherePackingAllows) {
  // 5 racks of 5, pipelines of 4, 4 replicas (16 of 25): 9 standbys. Each
  // rack's spare (25 = 5 x (4 + 1)) first, one a rack; then one whole
  // replica's machines: packing wins over spreading.
  std::vector<MachineId> reserve;
  const std::vector<MachineId> slots = DomainAwareSlots(Racks(5, 5), 16, 4, &reserve);
  ASSERT_EQ(reserve.size(), 9u);
  std::map<std::string, int> per_rack;
  for (const MachineId& m : reserve) ++per_rack[RackOf(m)];
  EXPECT_EQ(per_rack.size(), 5u);  // a standby under every switch
  int replicas = 0;
  for (int r = 0; r < 5; ++r) {
    const int n = ReplicasInDomain(slots, 4, "r" + std::to_string(r), RackOf);
    EXPECT_LE(n, 1) << r;  // every replica under one switch
    replicas += n;
  }
  EXPECT_EQ(replicas, 4);
}

TEST(DomainPlacement, RacksSmallerThanAPipelineHoldStagesOfOneReplica) {
  // Llama 3's racks: 2 machines a switch; pipelines of 4 stages. A rack's
  // loss takes one replica, not two.
  const std::vector<MachineId> slots = DomainAwareSlots(Racks(8, 2), 16, 4);
  for (int r = 0; r < 8; ++r) EXPECT_EQ(ReplicasInDomain(slots, 4, "r" + std::to_string(r), RackOf), 1) << r;
}

TEST(DomainPlacement, MachinesWithNoDomainComeLastAndFirstToTheReserve) {
  auto pool = Racks(2, 2);
  pool.push_back({"x1", ""});
  std::vector<MachineId> reserve;
  const std::vector<MachineId> slots = DomainAwareSlots(pool, 4, 2, &reserve);
  EXPECT_EQ(reserve, std::vector<MachineId>{"x1"});
  EXPECT_EQ(slots.size(), 4u);
}

TEST(DomainPlacement, TheControllersFirstPlacementPacksReplicasUnderOneSwitch) {
  // A pipeline job of 2 replicas x 2 stages on racks r0 = m01 m02,
  // r1 = m03 m04: in id order (slot s x 2 + c) each switch holds one stage
  // of both replicas.
  JobSpec spec;
  spec.id = "llama";
  spec.ranks_per_machine = 2;
  spec.world_size = 8;
  spec.pp = 2;
  spec.command = "bulwark-train";
  const std::map<MachineId, std::string> racks = {{"m01", "r0"}, {"m02", "r0"}, {"m03", "r1"},
                                                   {"m04", "r1"}, {"s01", "r2"}, {"s02", "r3"}};
  for (const bool aware : {true, false}) {
    PolicyConfig config;
    config.domain_aware_placement = aware;
    Result<Controller> c = Controller::Create(spec, config, {"m01", "m02", "m03", "m04", "s01", "s02"}, S(0), racks);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_TRUE(c->Reconcile(S(0)).ok());
    const auto& slots = c->state().placement.slots;
    auto domain_of = [&](const MachineId& m) { return racks.at(m); };
    // Slot s x 2 + c: aware, replica 0 = (m01, m02) under r0, replica 1 = (m03, m04) under r1.
    if (aware) { EXPECT_EQ(slots, (std::vector<MachineId>{"m01", "m03", "m02", "m04"})); }
    EXPECT_EQ(ReplicasInDomain(slots, 2, "r0", domain_of), aware ? 1 : 2);
    EXPECT_EQ(ReplicasInDomain(slots, 2, "r1", domain_of), aware ? 1 : 2);
  }
}

}  // namespace
}  // namespace bulwark::controller
