// The controller's policy, as specifications: one scripted episode per test,
// driven on a virtual clock. The fixture's job is 4 machines (m01..m04, 2
// ranks each) with standbys s01 and s02; step k completes at 10k s.
#include <gtest/gtest.h>

#include "support/controller_fixture.h"

namespace bulwark::controller {
namespace {

using testing::Briefs;
using testing::Crash;
using testing::DeviceFailed;
using testing::Flap;
using testing::HeartbeatLost;
using testing::Job;
using testing::Joined;
using testing::Lines;
using testing::Restored;
using testing::Returned;
using testing::S;
using testing::Secs;
using testing::Step;

// ---------------------------------------------------------------------------
// High-confidence machine faults: evict at once, swap in a standby
// ---------------------------------------------------------------------------

TEST(Policy, EvictsMachineOnDeviceFailureAndSwapsInStandby) {
  Job job;
  job.StartAndRun(10);
  auto acts = job.Do(DeviceFailed("m02", S(105)));
  // The standby takes m02's slot, so ranks 2 and 3 keep their ids.
  EXPECT_EQ(Briefs(acts), (Lines{"evict m02", "activate s01", "restart_all g2 m01,s01,m03,m04 ckpt 10"}));
  EXPECT_EQ(job.StateOf("m02"), MachineState::kEvicted);
  EXPECT_EQ(job.StateOf("s01"), MachineState::kActive);
  EXPECT_EQ(job.state().job, JobState::kRestarting);
  const Incident& inc = job.LastIncident();
  EXPECT_EQ(inc.cls, IncidentClass::kExplicit);
  EXPECT_EQ(inc.resolution, Resolution::kEvictedAndReplaced);
  EXPECT_EQ(inc.evicted, std::vector<MachineId>{"m02"});
  EXPECT_FALSE(inc.closed);

  job.Do(Step(11, S(160)));
  EXPECT_EQ(job.state().job, JobState::kRunning);
  EXPECT_TRUE(job.LastIncident().closed);
}

TEST(Policy, RankExitWithHardwareSignatureEvictsAtOnce) {
  for (const char* signature : {"xid", "ecc", "cuda_error", "nccl_hardware"}) {
    Job job;
    job.StartAndRun(10);
    auto acts = job.Do(Crash("m03", signature, S(105)));
    EXPECT_EQ(Briefs(acts), (Lines{"evict m03", "activate s01", "restart_all g2 m01,m02,s01,m04 ckpt 10"}))
        << signature;
  }
}

TEST(Policy, NcclErrorAloneIsNotAHardwareSign) {
  // Every surviving rank reports an NCCL error when a peer dies: evicting on
  // it would evict healthy machines.
  Job job;
  job.StartAndRun(10);
  auto acts = job.Do(Crash("m03", "nccl", S(105)));
  EXPECT_EQ(Briefs(acts), (Lines{"restart_all g2 m01,m02,m03,m04 ckpt 10"}));
}

TEST(Policy, LostHeartbeatEvictsMachine) {
  Job job;
  job.StartAndRun(10);
  auto acts = job.Do(HeartbeatLost("m04", S(101), S(131)));
  EXPECT_EQ(Briefs(acts), (Lines{"evict m04", "activate s01", "restart_all g2 m01,m02,m03,s01 ckpt 10"}));
}

TEST(Policy, RepeatedFaultReportIsANoOp) {
  Job job;
  job.StartAndRun(10);
  job.Do(DeviceFailed("m02", S(105)));
  EXPECT_TRUE(job.Do(DeviceFailed("m02", S(106))).empty());
  EXPECT_TRUE(job.Do(HeartbeatLost("m02", S(104), S(107))).empty());
  EXPECT_EQ(job.controller->incidents().size(), 1u);
}

TEST(Policy, LostStandbyShrinksThePoolWithoutAnIncident) {
  Job job;
  job.StartAndRun(10);
  // Pool target for 4 machines at p = 0.005/day is 1; two standbys remain one.
  EXPECT_EQ(Briefs(job.Do(HeartbeatLost("s02", S(95), S(105)))), (Lines{"evict s02"}));
  EXPECT_EQ(Briefs(job.Do(HeartbeatLost("s01", S(96), S(106)))), (Lines{"evict s01", "replenish 1"}));
  EXPECT_TRUE(job.controller->incidents().empty());
  EXPECT_EQ(job.state().job, JobState::kRunning);
}

// ---------------------------------------------------------------------------
// Network alerts: 2 within 5 minutes evict; a single flap heals
// ---------------------------------------------------------------------------

TEST(Policy, SingleNicFlapIsTolerated) {
  Job job;
  job.StartAndRun(10);
  EXPECT_TRUE(job.Do(Flap("m03", S(105))).empty());
  EXPECT_EQ(job.StateOf("m03"), MachineState::kActive);
  EXPECT_EQ(job.state().FindMachine("m03")->network_alerts.size(), 1u);
  EXPECT_TRUE(job.controller->incidents().empty());
}

TEST(Policy, SecondNicFlapWithinFiveMinutesEvicts) {
  Job job;
  job.StartAndRun(10);
  job.Do(Flap("m03", S(105)));
  auto acts = job.Do(Flap("m03", S(105 + 299)));
  EXPECT_EQ(Briefs(acts), (Lines{"evict m03", "activate s01", "restart_all g2 m01,m02,s01,m04 ckpt 10"}));
  EXPECT_EQ(job.LastIncident().fault, S(105));  // the first flap is when it went bad
}

TEST(Policy, FlapsFurtherApartThanWindowDoNotEvict) {
  Job job;
  job.StartAndRun(10);
  EXPECT_TRUE(job.Do(Flap("m03", S(105))).empty());
  EXPECT_TRUE(job.Do(Flap("m03", S(105 + 301))).empty());
  EXPECT_EQ(job.StateOf("m03"), MachineState::kActive);
  // A third flap within 5 minutes of the second is the second in its window.
  EXPECT_EQ(Briefs(job.Do(Flap("m03", S(105 + 301 + 60))))[0], "evict m03");
}

TEST(Policy, DuplicatedAlertCountsOnce) {
  Job job;
  job.StartAndRun(10);
  job.Do(Flap("m03", S(105)), S(106));
  EXPECT_TRUE(job.Do(Flap("m03", S(105)), S(107)).empty());
  EXPECT_EQ(job.StateOf("m03"), MachineState::kActive);
}

TEST(Policy, FlapThresholdsAreConfigurable) {
  PolicyConfig config;
  config.network_alerts_to_evict = 3;
  config.network_alert_window = std::chrono::minutes(1);
  Job job(4, 2, config);
  job.StartAndRun(10);
  EXPECT_TRUE(job.Do(Flap("m01", S(101))).empty());
  EXPECT_TRUE(job.Do(Flap("m01", S(102))).empty());
  EXPECT_EQ(Briefs(job.Do(Flap("m01", S(103))))[0], "evict m01");
}

// ---------------------------------------------------------------------------
// Crashes that name no machine: reattempt, evict on recurrence, stop loops
// ---------------------------------------------------------------------------

TEST(Policy, CrashWithoutHardwareSignReattemptsInPlace) {
  Job job;
  job.StartAndRun(10);
  auto acts = job.Do(Crash("m02", "exception", S(105)));
  EXPECT_EQ(Briefs(acts), (Lines{"restart_all g2 m01,m02,m03,m04 ckpt 10"}));
  EXPECT_EQ(job.StateOf("m02"), MachineState::kActive);
  EXPECT_EQ(job.LastIncident().resolution, Resolution::kReattempt);
  EXPECT_TRUE(job.LastIncident().evicted.empty());
}

TEST(Policy, CleanExitIsNotAFault) {
  Job job;
  job.StartAndRun(10);
  EXPECT_TRUE(job.Do(RankExited{"m02", 3, 0, 0, "", S(105)}).empty());
  EXPECT_TRUE(job.controller->incidents().empty());
}

TEST(Policy, EchoesOfAHandledFaultAreIgnored) {
  // When m02 dies its peers fail in their collectives; those exits were
  // observed before the restart that already handles the episode.
  Job job;
  job.StartAndRun(10);
  job.Do(DeviceFailed("m02", S(105)), S(106));
  EXPECT_TRUE(job.Do(Crash("m01", "connection_reset", S(105.5)), S(107)).empty());
  EXPECT_TRUE(job.Do(Crash("m03", "nccl", S(106)), S(108)).empty());
  EXPECT_EQ(job.controller->incidents().size(), 1u);
  EXPECT_EQ(job.state().placement.generation, 2);
}

TEST(Policy, RecurringCrashOnSameMachineEvictsIt) {
  Job job;
  job.StartAndRun(10);
  EXPECT_EQ(Briefs(job.Do(Crash("m02", "segfault", S(105)))),
            (Lines{"restart_all g2 m01,m02,m03,m04 ckpt 10"}));
  job.RunSteps(11, 20, S(170));  // progress: step 20 at 260 s
  auto acts = job.Do(Crash("m02", "segfault", S(400)));  // within 10 min of the first
  EXPECT_EQ(Briefs(acts), (Lines{"evict m02", "activate s01", "restart_all g3 m01,s01,m03,m04 ckpt 20"}));
  EXPECT_EQ(job.LastIncident().evicted, std::vector<MachineId>{"m02"});
}

TEST(Policy, CrashesOnSameMachineFurtherApartThanWindowReattempt) {
  Job job;
  job.StartAndRun(10);
  job.Do(Crash("m02", "segfault", S(105)));
  job.RunSteps(11, 20, S(170));
  auto acts = job.Do(Crash("m02", "segfault", S(105 + 601)));
  EXPECT_EQ(Briefs(acts), (Lines{"restart_all g3 m01,m02,m03,m04 ckpt 20"}));
}

TEST(Policy, SoftwareErrorEverywhereStopsJobWithIncident) {
  Job job;
  job.StartAndRun(10);
  job.Do(Crash("m01", "exception", S(105)));
  // The same error on another machine, with no step in between: the code is
  // broken, and restarting it again would loop.
  auto acts = job.Do(Crash("m02", "exception", S(130)));
  EXPECT_EQ(Briefs(acts), (Lines{"stop"}));
  EXPECT_EQ(job.state().job, JobState::kStopped);
  const Incident& inc = job.LastIncident();
  EXPECT_EQ(inc.resolution, Resolution::kStopped);
  EXPECT_TRUE(inc.closed);
  EXPECT_NE(inc.why.find("'exception' on m01 and m02"), std::string::npos) << inc.why;
  EXPECT_NE(inc.why.find("code"), std::string::npos) << inc.why;
  EXPECT_EQ(acts[0].reason, inc.why);
  EXPECT_EQ(acts[0].incident, inc.id);
  // Stopped is terminal: nothing restarts it, not even a dead machine.
  EXPECT_TRUE(job.Reconcile(S(200)).empty());
  EXPECT_EQ(Briefs(job.Do(DeviceFailed("m03", S(300)))), (Lines{"evict m03"}));
}

TEST(Policy, CrashLoopWithoutProgressStopsJob) {
  Job job;
  job.StartAndRun(10);
  EXPECT_EQ(Briefs(job.Do(Crash("m01", "segfault", S(105))))[0], "restart_all g2 m01,m02,m03,m04 ckpt 10");
  EXPECT_EQ(Briefs(job.Do(Crash("m02", "", S(130))))[0], "restart_all g3 m01,m02,m03,m04 ckpt 10");
  EXPECT_EQ(Briefs(job.Do(Crash("m03", "oom", S(160)))), (Lines{"stop"}));
  EXPECT_NE(job.LastIncident().why.find("3 crashes"), std::string::npos) << job.LastIncident().why;
  EXPECT_EQ(job.controller->incidents().size(), 1u);  // one episode, never resumed
}

// Without a ladder to diagnose it, a failure that repeats at the same step
// on the same machine costs the machine, not the job: restarted on a
// standby, the job shows whether the failure follows it.
TEST(Policy, SameFailureAtSameStepOnSameMachineWithoutLadderEvictsIt) {
  PolicyConfig config;
  config.ladder.rungs.clear();
  Job job(4, 2, config);
  job.StartAndRun(10);
  EXPECT_EQ(Briefs(job.Do(Crash("m02", "", S(105)))), (Lines{"restart_all g2 m01,m02,m03,m04 ckpt 10"}));
  job.Do(Restored(10, "memory", 10, 5, S(110)));
  auto acts = job.Do(Crash("m02", "", S(120)));  // step 11 again, after the restore
  EXPECT_EQ(Briefs(acts), (Lines{"evict m02", "activate s01", "restart_all g3 m01,s01,m03,m04 ckpt 10"}));
  EXPECT_NE(job.state().job, JobState::kStopped);
  EXPECT_EQ(job.LastIncident().evicted, std::vector<MachineId>{"m02"});
}

// ---------------------------------------------------------------------------
// Peer-lost exits: echoes, never a loop; a named unreachable peer is evicted
// ---------------------------------------------------------------------------

Event PeerLost(const MachineId& m, Time at, const MachineId& unreachable = "", const std::string& addr = "") {
  return RankExited{m, 0, 3, 0, "connection_reset", at, unreachable, addr};
}

TEST(Policy, PeerLostExitsNeverMakeACrashLoop) {
  Job job;
  job.StartAndRun(10);
  // Far more peer-lost restarts without progress than the loop bound (3).
  for (int i = 0; i < 6; ++i) {
    auto acts = job.Do(PeerLost(i % 2 ? "m01" : "m03", S(105 + 20 * i)));
    ASSERT_EQ(acts.size(), 1u) << i;
    EXPECT_EQ(acts[0].kind, ActionKind::kRestartAll) << i;
  }
  EXPECT_NE(job.state().job, JobState::kStopped);
  // Two real crashes among them are still only two.
  EXPECT_EQ(Briefs(job.Do(Crash("m02", "segfault", S(300))))[0], "restart_all g8 m01,m02,m03,m04 ckpt 10");
  EXPECT_EQ(Briefs(job.Do(PeerLost("m01", S(320))))[0], "restart_all g9 m01,m02,m03,m04 ckpt 10");
  EXPECT_EQ(Briefs(job.Do(Crash("m04", "oom", S(340))))[0], "restart_all g10 m01,m02,m03,m04 ckpt 10");
  EXPECT_NE(job.state().job, JobState::kStopped);
}

// Issue 40's reproduction in the policy: a machine whose advertised address
// nobody can reach joins the job; its neighbours' ranks exit naming it.
TEST(Policy, ExitNamingAnUnreachablePeerEvictsThePeerAndTheJobGoesOn) {
  Job job;
  job.StartAndRun(10);
  auto acts = job.Do(PeerLost("m03", S(105), "m02", "127.0.0.1:58237"), S(106));
  EXPECT_EQ(Briefs(acts), (Lines{"evict m02", "activate s01", "restart_all g2 m01,s01,m03,m04 ckpt 10"}));
  EXPECT_EQ(job.StateOf("m02"), MachineState::kEvicted);
  const Incident& inc = job.LastIncident();
  EXPECT_EQ(inc.evicted, std::vector<MachineId>{"m02"});
  EXPECT_NE(inc.why.find("cannot reach it at 127.0.0.1:58237"), std::string::npos) << inc.why;
  // The other neighbour's exit, reported after the eviction, is its echo.
  EXPECT_TRUE(job.Do(PeerLost("m01", S(105.5), "m02", "127.0.0.1:58237"), S(107)).empty());
  EXPECT_TRUE(job.Do(PeerLost("m04", S(110), "m02", "127.0.0.1:58237"), S(110)).empty());
  EXPECT_EQ(job.controller->incidents().size(), 1u);
  job.RunSteps(11, 12, S(130));
  EXPECT_EQ(job.state().job, JobState::kRunning);
}

TEST(Policy, UnreachablePeerNamedAgainAndAgainCostsOnlyThatMachine) {
  // The agent restarted wrongly comes back as a standby and is taken again.
  Job job(4, 1);
  job.StartAndRun(10);
  job.Do(PeerLost("m03", S(105), "m02", "127.0.0.1:58237"), S(106));
  EXPECT_EQ(job.StateOf("s01"), MachineState::kActive);
  auto acts = job.Do(PeerLost("m04", S(120), "s01", "127.0.0.1:40001"));
  EXPECT_EQ(Briefs(acts)[0], "evict s01");
  EXPECT_NE(job.state().job, JobState::kStopped);
  for (const Incident& inc : job.controller->incidents()) EXPECT_NE(inc.resolution, Resolution::kStopped);
}

TEST(Policy, ExitNamingNoKnownMachineIsAnOrdinaryPeerLoss) {
  Job job;
  job.StartAndRun(10);
  EXPECT_EQ(Briefs(job.Do(PeerLost("m03", S(105), "", "10.9.9.9:1234"))),
            (Lines{"restart_all g2 m01,m02,m03,m04 ckpt 10"}));
  // A rank that names its own machine blames nobody else.
  EXPECT_EQ(Briefs(job.Do(PeerLost("m03", S(130), "m03", "10.0.0.3:1234"))),
            (Lines{"restart_all g3 m01,m02,m03,m04 ckpt 10"}));
  EXPECT_EQ(job.StateOf("m03"), MachineState::kActive);
}

// Issue 41's GPU run in the policy: 2 machines + 1 standby, a kill of m01,
// then, before the slow (CUDA, disk-restoring) restart completed a step,
// m02 down. m01's peer-lost exits, before and after m02's eviction, are
// echoes: with them counted, kill + 2 exits made "3 crashes without a
// completed step" and the ladder stopped the job as deterministic.
TEST(Policy, AKillThenAMachineDownBeforeTheRestartsFirstStepDoNotStopTheJob) {
  // Exit code 3 (kExitPeerLost) and no log signature: counted, such a
  // crash climbs the ladder, which finds no machine and stops the job.
  auto peer_lost = [](double at) { return RankExited{"m01", 0, 3, 0, "", S(at)}; };
  Job job(2, 1);
  job.StartAndRun(10);
  EXPECT_EQ(Briefs(job.Do(RankExited{"m01", 0, 0, 9, "", S(105)})), (Lines{"restart_all g2 m01,m02 ckpt 10"}));
  EXPECT_EQ(Briefs(job.Do(peer_lost(117.5))), (Lines{"restart_all g3 m01,m02 ckpt 10"}));
  EXPECT_EQ(Briefs(job.Do(HeartbeatLost("m02", S(117), S(119)))),
            (Lines{"evict m02", "activate s01", "restart_all g4 m01,s01 ckpt 10"}));
  EXPECT_EQ(Briefs(job.Do(peer_lost(131))), (Lines{"restart_all g5 m01,s01 ckpt 10"}));
  EXPECT_EQ(job.state().ladder.state, LadderState::kIdle);
  job.RunSteps(11, 12, S(150));
  EXPECT_EQ(job.state().job, JobState::kRunning);
  for (const Incident& inc : job.controller->incidents()) EXPECT_NE(inc.resolution, Resolution::kStopped) << inc.why;
}

TEST(Policy, ACrashThatIsNotPeerLostBlamesNoPeer) {
  Job job;
  job.StartAndRun(10);
  // A rank's own error that happens to name an address is its own crash.
  EXPECT_EQ(Briefs(job.Do(RankExited{"m03", 0, 1, 0, "exception", S(105), "m02", "10.0.0.2:1"})),
            (Lines{"restart_all g2 m01,m02,m03,m04 ckpt 10"}));
  EXPECT_EQ(job.StateOf("m02"), MachineState::kActive);
}

TEST(Policy, ProgressRenewsTheRestartBudget) {
  Job job;
  job.StartAndRun(10);
  job.Do(Crash("m01", "segfault", S(105)));
  job.Do(Step(11, S(170)));
  job.Do(Crash("m02", "", S(200)));
  job.Do(Step(12, S(260)));
  EXPECT_EQ(Briefs(job.Do(Crash("m03", "oom", S(300)))), (Lines{"restart_all g4 m01,m02,m03,m04 ckpt 10"}));
  EXPECT_EQ(job.controller->incidents().size(), 3u);
}

TEST(Policy, SameErrorOnAnotherMachineAfterProgressReattempts) {
  Job job;
  job.StartAndRun(10);
  job.Do(Crash("m01", "exception", S(105)));
  job.Do(Step(11, S(170)));
  EXPECT_EQ(Briefs(job.Do(Crash("m02", "exception", S(200)))),
            (Lines{"restart_all g3 m01,m02,m03,m04 ckpt 10"}));
}

TEST(Policy, FailedProcessInspectionIsHandledLikeACrash) {
  Job job;
  job.StartAndRun(10);
  auto acts = job.Do(InspectionFailed{"m04", InspectionKind::kProcess, "rank in D state", S(105)});
  EXPECT_EQ(Briefs(acts), (Lines{"restart_all g2 m01,m02,m03,m04 ckpt 10"}));
}

TEST(Policy, ManualRestartIsAManualIncident) {
  Job job;
  job.StartAndRun(10);
  auto acts = job.Do(ManualRestart{"hot update: fused kernel fix", S(105)});
  EXPECT_EQ(Briefs(acts), (Lines{"restart_all g2 m01,m02,m03,m04 ckpt 10"}));
  EXPECT_EQ(job.LastIncident().cls, IncidentClass::kManual);
  job.Do(Step(11, S(135)));
  EXPECT_EQ(job.controller->Cumulative(S(135)).of(TimeCategory::kManual), Secs(30));
}

// ---------------------------------------------------------------------------
// The standby pool runs dry: wait, resume on a passed self-check
// ---------------------------------------------------------------------------

TEST(Policy, NoStandbyLeftJobWaitsThenResumesWhenMachineJoins) {
  Job job(4, 0);
  job.StartAndRun(10);
  auto acts = job.Do(DeviceFailed("m02", S(105)));
  EXPECT_EQ(Briefs(acts), (Lines{"evict m02", "wait 1", "replenish 1"}));
  EXPECT_NE(acts[1].reason.find("waiting"), std::string::npos);
  EXPECT_EQ(job.state().job, JobState::kWaitingForMachines);
  EXPECT_EQ(job.LastIncident().resolution, Resolution::kWaiting);

  acts = job.Do(Joined("n01", true, S(400)));
  EXPECT_EQ(Briefs(acts), (Lines{"activate n01", "restart_all g2 m01,n01,m03,m04 ckpt 10", "replenish 1"}));
  EXPECT_EQ(job.state().job, JobState::kRestarting);

  job.Do(Step(11, S(460)));
  const Incident& inc = job.LastIncident();
  EXPECT_TRUE(inc.closed);
  EXPECT_EQ(inc.resolution, Resolution::kEvictedAndReplaced);
  EXPECT_EQ(inc.waited, Secs(295));
  EXPECT_EQ(inc.RecoverDuration(), Secs(355));
  EXPECT_EQ(job.controller->Cumulative(S(460)).of(TimeCategory::kWaiting), Secs(295));
}

TEST(Policy, JoiningMachineFailingSelfCheckIsNotAdded) {
  Job job(4, 0);
  job.StartAndRun(10);
  auto waiting = job.Do(DeviceFailed("m02", S(105)));
  auto acts = job.Do(Joined("n01", false, S(300)));
  EXPECT_EQ(Briefs(acts), (Lines{"evict n01", "wait 1", "replenish 1"}));
  // Still the same wait: the actuator sees the id it already carried out.
  EXPECT_EQ(acts[1].id, waiting[1].id);
  EXPECT_EQ(job.StateOf("n01"), MachineState::kEvicted);
  EXPECT_TRUE(job.state().standbys.empty());
  EXPECT_EQ(job.state().job, JobState::kWaitingForMachines);
}

TEST(Policy, EvictedMachineStaysOutUntilReturned) {
  Job job;
  job.StartAndRun(10);
  job.Do(DeviceFailed("m02", S(105)));
  Result<std::vector<Action>> rejoin = job.controller->Handle(Joined("m02", true, S(200)), S(200));
  ASSERT_FALSE(rejoin.ok());
  EXPECT_EQ(rejoin.status().code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(rejoin.status().message().find("operator"), std::string::npos);
  EXPECT_EQ(job.StateOf("m02"), MachineState::kEvicted);

  EXPECT_TRUE(job.Do(Returned("m02", S(300))).empty());
  EXPECT_EQ(job.StateOf("m02"), MachineState::kJoining);
  EXPECT_TRUE(job.Do(Joined("m02", true, S(310))).empty());
  EXPECT_EQ(job.StateOf("m02"), MachineState::kStandby);
  EXPECT_EQ(job.state().standbys, (std::set<MachineId>{"m02", "s02"}));
}

TEST(Policy, OnlyEvictedMachinesCanBeReturned) {
  Job job;
  job.StartAndRun(1);
  Result<std::vector<Action>> r = job.controller->Handle(Returned("m01", S(20)), S(20));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kFailedPrecondition);
}

// ---------------------------------------------------------------------------
// Inputs the policy refuses
// ---------------------------------------------------------------------------

TEST(Policy, UnknownMachineIsReportedNotInvented) {
  Job job;
  job.StartAndRun(1);
  Result<std::vector<Action>> r = job.controller->Handle(Crash("zz99", "", S(20)), S(20));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kNotFound);
  EXPECT_NE(r.status().message().find("zz99"), std::string::npos);
  EXPECT_EQ(job.state().FindMachine("zz99"), nullptr);
}

// ---------------------------------------------------------------------------
// In-memory checkpoints: the incident records what was restored
// ---------------------------------------------------------------------------

TEST(Policy, RestoreReportRecordsSourceStepAndTheProgressTheFaultLeft) {
  Job job;
  job.StartAndRun(10);
  job.Do(DeviceFailed("m02", S(105)));
  EXPECT_EQ(job.LastIncident().step_at_fault, 10);
  // The ranks had reached step 12 (the controller's step reports lag), and
  // the slowest one restored step 5 from durable storage.
  job.Do(Restored(5, "durable", 12, 2300, S(130)));
  const Incident& inc = job.LastIncident();
  EXPECT_EQ(inc.restored_step, 5);
  EXPECT_EQ(inc.restore_source, "durable");
  EXPECT_EQ(inc.restore_ms, 2300);
  EXPECT_EQ(inc.step_at_fault, 12);
  EXPECT_EQ(inc.LostSteps(), 7);
  EXPECT_FALSE(inc.closed);  // restored is not yet trained
  // The first step reported after it is not 6: the restore report wins
  // over the inference from the first step.
  job.Do(Step(7, S(150)));
  EXPECT_TRUE(job.LastIncident().closed);
  EXPECT_EQ(job.LastIncident().restored_step, 5);
}

TEST(Policy, RestoreReportNeverLowersStepAtFault) {
  Job job;
  job.StartAndRun(10);
  job.Do(DeviceFailed("m02", S(105)));
  job.Do(Restored(10, "peer", 9, 840, S(130)));
  EXPECT_EQ(job.LastIncident().step_at_fault, 10);
  EXPECT_EQ(job.LastIncident().LostSteps(), 0);
}

TEST(Policy, WithoutRestoreReportTheFirstStepSaysWhatWasRestored) {
  Job job;
  job.StartAndRun(10);
  job.Do(DeviceFailed("m02", S(105)));
  job.Do(Step(11, S(160)));
  const Incident& inc = job.LastIncident();
  EXPECT_EQ(inc.restored_step, 10);
  EXPECT_TRUE(inc.restore_source.empty());
  EXPECT_FALSE(inc.restore_ms.has_value());
  EXPECT_EQ(inc.LostSteps(), 0);
}

TEST(Policy, RestoreReportTrailingTheFirstStepStillBelongsToTheIncident) {
  Job job;
  job.StartAndRun(10);
  job.Do(DeviceFailed("m02", S(105)));
  job.Do(Step(10, S(160)));  // the inference says 9
  job.Do(Restored(8, "peer", 10, 900, S(161)));
  EXPECT_EQ(job.LastIncident().restored_step, 8);
  EXPECT_EQ(job.LastIncident().restore_source, "peer");
  EXPECT_EQ(job.LastIncident().LostSteps(), 2);
  // A second report of the same restore changes nothing; the incident
  // took its restore already.
  job.Do(Restored(3, "durable", 10, 900, S(162)));
  EXPECT_EQ(job.LastIncident().restored_step, 8);
}

TEST(Policy, RestoreByRanksSinceRestartedAgainIsIgnored) {
  Job job;
  job.StartAndRun(10);
  job.Do(DeviceFailed("m02", S(105)));
  job.Do(Crash("m01", "exception", S(120)));  // restarts again at 120
  job.Do(Restored(4, "durable", 10, 500, S(115)), S(121));
  EXPECT_FALSE(job.LastIncident().restore_ms.has_value());
  EXPECT_FALSE(job.LastIncident().restored_step.has_value());
}

TEST(Policy, RestoreAtTheFirstStartIsNoIncident) {
  Job job;
  job.Reconcile(S(0));
  job.Do(Restored(40, "durable", 40, 1200, S(5)));
  job.Do(Step(41, S(10)));
  EXPECT_TRUE(job.controller->incidents().empty());
}

TEST(Policy, TimeMustNotGoBackwards) {
  Job job;
  job.StartAndRun(3);
  Result<std::vector<Action>> r = job.controller->Handle(Step(4, S(5)), S(5));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
}

TEST(Policy, SameEventsGiveSameDecisions) {
  // The simulator replays histories: the policy must be a function of them.
  auto run = [] {
    Job job(4, 1);
    job.StartAndRun(10);
    std::vector<std::string> ids;
    for (const Event& e : std::vector<Event>{Crash("m01", "exception", S(105)), Step(11, S(170)),
                                             Flap("m02", S(200)), Flap("m02", S(230)),
                                             DeviceFailed("m03", S(300)), Joined("n01", true, S(400)),
                                             Step(12, S(460))}) {
      for (const Action& a : job.Do(e)) ids.push_back(a.id);
    }
    return ids;
  };
  std::vector<std::string> first = run();
  EXPECT_EQ(first, run());
  ASSERT_EQ(first.size(), 12u) << ::testing::PrintToString(first);
  // The pool stayed one short from n01's activation to the last step: the
  // reconcile after the step repeats the same request, under the same id.
  EXPECT_EQ(first[10], first[11]);
}

TEST(Policy, BadSpecIsRejectedAtCreation) {
  JobSpec spec;
  spec.id = "odd";
  spec.world_size = 7;
  spec.ranks_per_machine = 2;
  Result<Controller> c = Controller::Create(spec, PolicyConfig{}, {}, S(0));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("ranks_per_machine"), std::string::npos);
}

}  // namespace
}  // namespace bulwark::controller
