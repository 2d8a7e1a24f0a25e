// The stop-time ladder, pure: its transition table, the diagnostics
// verdict, dual-phase replay's groups and intersection (Algorithm 1), and
// the policy climbing the rungs on a virtual clock. No processes, no sockets.
#include <gtest/gtest.h>

#include <set>

#include "controller/ladder.h"
#include "controller/policy.h"
#include "support/controller_fixture.h"

namespace bulwark::controller {
namespace {

using testing::Briefs;
using testing::Lines;
using testing::S;
using testing::Secs;

// ---------------------------------------------------------------------------
// The table and the configuration

TEST(Ladder, TableNamesFromAndInputOfAnIllegalTransition) {
  EXPECT_EQ(*LadderNext(LadderState::kIdle, LadderInput::kDiagnose), LadderState::kDiagnosing);
  EXPECT_EQ(*LadderNext(LadderState::kWatching, LadderInput::kSettled), LadderState::kIdle);
  Result<LadderState> bad = LadderNext(LadderState::kIdle, LadderInput::kSettled);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("from idle on settled"), std::string::npos) << bad.status().ToString();
  EXPECT_FALSE(LadderNext(LadderState::kReplaying, LadderInput::kDiagnose).ok()) << "a replay is never re-diagnosed";
  LadderConfig c;
  EXPECT_EQ(LadderBudget(LadderState::kDiagnosing, c), c.diagnose_budget);
  EXPECT_EQ(LadderBudget(LadderState::kReplaying, c), c.replay_budget);
  EXPECT_EQ(LadderBudget(LadderState::kWatching, c).count(), 0) << "watching is bounded by steps";
}

TEST(Ladder, UnknownRungOrZeroBudgetIsAOneLineErrorAtStart) {
  JobSpec spec;
  spec.id = "j";
  spec.world_size = 1;
  spec.command = "x";
  PolicyConfig unknown;
  unknown.ladder.rungs = {"diagnose", "pray"};
  auto c = Controller::Create(spec, unknown, {"m01"}, S(0));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("rung 'pray' is unknown"), std::string::npos) << c.status().ToString();
  EXPECT_EQ(c.status().ToString().find('\n'), std::string::npos);
  PolicyConfig zero;
  zero.ladder.diagnose_budget = Duration(0);
  auto z = Controller::Create(spec, zero, {"m01"}, S(0));
  ASSERT_FALSE(z.ok());
  EXPECT_NE(z.status().message().find("diagnose_budget"), std::string::npos) << z.status().ToString();
  PolicyConfig test;
  test.ladder.tests = {"compute", "gpu-burn"};
  EXPECT_FALSE(test.Validate().ok());
  test.ladder.tests = {"compute", "network"};
  EXPECT_TRUE(test.Validate().ok());
  test.ladder.net_slow_ratio = 1;
  EXPECT_NE(test.Validate().message().find("net_slow_ratio"), std::string::npos);
}

// ---------------------------------------------------------------------------
// The verdict on diagnostics

MachineDiagnostics Passed(double compute_ms, const std::string& hash) {
  return {{{"compute", true, "", compute_ms}, {"device", true, "", 1}, {"alignment", true, "", 900}}, hash};
}

TEST(Diagnostics, WrongSlowMisalignedAndSilentMachinesFail) {
  const std::vector<MachineId> ms = {"a", "b", "c", "d", "e", "f", "g", "h"};
  std::map<MachineId, MachineDiagnostics> r;
  for (const MachineId& m : ms) r[m] = Passed(100, "h1");
  r["b"].results[0] = {"compute", false, "GEMM hash 1234 != expected 5678", 100};
  r["c"] = Passed(250, "h1");  // 2.5x the median
  r["d"] = Passed(100, "h2");  // disagrees with the majority
  r.erase("e");                // never answered
  const DiagnosticsVerdict v = JudgeDiagnostics(ms, r, LadderConfig{}, " within 1 min");
  EXPECT_TRUE(v.inconclusive) << "4 of 8 failing says the test, not the machines: " << v.why;

  r["b"] = Passed(100, "h1");
  const DiagnosticsVerdict w = JudgeDiagnostics(ms, r, LadderConfig{}, " within 1 min");
  EXPECT_FALSE(w.inconclusive);
  EXPECT_EQ(w.failed.size(), 3u) << w.why;
  EXPECT_NE(w.failed.at("c").find("2.5x the fleet's median"), std::string::npos) << w.failed.at("c");
  EXPECT_NE(w.failed.at("d").find("differs from the majority"), std::string::npos);
  EXPECT_EQ(w.failed.at("e"), "no answer within 1 min");
}

TEST(Diagnostics, NoStrictMajorityOfHashesBlamesNobody) {
  const std::vector<MachineId> ms = {"a", "b", "c", "d"};
  std::map<MachineId, MachineDiagnostics> r = {
      {"a", Passed(100, "x")}, {"b", Passed(100, "x")}, {"c", Passed(100, "y")}, {"d", Passed(100, "y")}};
  const DiagnosticsVerdict v = JudgeDiagnostics(ms, r, LadderConfig{}, "");
  EXPECT_TRUE(v.failed.empty());
  EXPECT_NE(v.why.find("no strict majority"), std::string::npos) << v.why;
}

// ---------------------------------------------------------------------------
// Dual-phase replay (Algorithm 1)

// ByteRobust's Fig. 6 replays 16 machines and names #13. The figure itself
// is not in ../shared/reference/byterobust.md; this is its setting as the
// text gives it (PP kept, DP shrunk, m = k*PP <= n = DP/k) with PP=4, DP=4,
// k=1: 4 horizontal groups (one stage each) and 4 vertical groups (one
// replica of every stage each). Machine 13 is stage 3, replica 1.
TEST(Replay, SixteenMachinesFindMachineThirteenAtTheIntersection) {
  Result<ReplayPlan> p = PlanReplay(16, 4, 1);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->horizontal.size(), 4u);  // m = k * PP
  ASSERT_EQ(p->vertical.size(), 4u);    // n = DP / k
  EXPECT_EQ(p->horizontal[3], (std::vector<int>{12, 13, 14, 15}));
  EXPECT_EQ(p->vertical[1], (std::vector<int>{1, 5, 9, 13}));
  // Only groups holding 13 diverge from a clean replay.
  std::vector<int> fh, fv;
  for (size_t i = 0; i < p->horizontal.size(); ++i) {
    for (int s : p->horizontal[i]) if (s == 13) fh.push_back(static_cast<int>(i));
  }
  for (size_t j = 0; j < p->vertical.size(); ++j) {
    for (int s : p->vertical[j]) if (s == 13) fv.push_back(static_cast<int>(j));
  }
  EXPECT_EQ(ReplayCulprit(*p, fh, fv), 13);
  EXPECT_EQ(ReplayCulprit(*p, fh, {}), std::nullopt) << "one phase alone names a group, not a machine";
  EXPECT_EQ(ReplayCulprit(*p, {1, 3}, fv), std::nullopt) << "two bad machines: Algorithm 1 assumes one";
}

TEST(Replay, EveryMachineIsInOneGroupPerPhaseAndEveryPairMeetsOnce) {
  for (auto [machines, pp, k] : std::vector<std::tuple<int, int, int>>{{16, 4, 1}, {16, 2, 2}, {8, 2, 2}, {4, 2, 1}, {12, 3, 2}}) {
    Result<ReplayPlan> p = PlanReplay(machines, pp, k);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(static_cast<int>(p->horizontal.size()), k * pp);
    EXPECT_EQ(static_cast<int>(p->vertical.size()), machines / pp / k);
    for (int slot = 0; slot < machines; ++slot) {
      int h = 0, v = 0;
      for (const auto& g : p->horizontal) h += static_cast<int>(std::count(g.begin(), g.end(), slot));
      for (const auto& g : p->vertical) v += static_cast<int>(std::count(g.begin(), g.end(), slot));
      EXPECT_EQ(h, 1);
      EXPECT_EQ(v, 1);
    }
    for (size_t i = 0; i < p->horizontal.size(); ++i) {
      for (size_t j = 0; j < p->vertical.size(); ++j) {
        EXPECT_TRUE(ReplayCulprit(*p, {static_cast<int>(i)}, {static_cast<int>(j)}).has_value());
      }
    }
    // Vertical groups keep the job's PP layout: one k-replica slice of every stage.
    for (const auto& g : p->vertical) EXPECT_EQ(static_cast<int>(g.size()), k * pp);
  }
  EXPECT_FALSE(PlanReplay(6, 4, 1).ok());
  // k = 0 picks the smallest k with at least 2x2 groups.
  EXPECT_EQ(PlanReplay(4, 1, 0)->k, 2);
  EXPECT_EQ(PlanReplay(16, 4, 0)->k, 1);
  EXPECT_EQ(PlanReplay(8, 1, 0)->k, 2);
  EXPECT_FALSE(PlanReplay(8, 2, 3).ok());
}

// ---------------------------------------------------------------------------
// The policy climbing the ladder

// A 4-machine job, one rank each, `pp` stages; standbys s01, s02.
struct LadderJob {
  explicit LadderJob(int pp = 1, PolicyConfig config = {}) {
    JobSpec spec;
    spec.id = "j";
    spec.world_size = 4;
    spec.pp = pp;
    spec.command = "bulwark-train";
    auto c = Controller::Create(spec, config, {"m01", "m02", "m03", "m04", "s01", "s02"}, S(0));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    controller.emplace(std::move(*c));
    EXPECT_TRUE(controller->Reconcile(S(0)).ok());
    for (int k = 1; k <= 10; ++k) Do(StepCompleted{k, S(k)});
  }
  std::vector<Action> Act(const Event& e) {
    auto r = controller->Handle(e, ObservedAt(e));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : std::vector<Action>{};
  }
  Lines Do(const Event& e) { return Briefs(Act(e)); }
  // A no-culprit NaN at `step`, seen at `t`.
  Lines Nan(int64_t step, double t) {
    TrainingAnomaly a;
    a.step = step;
    a.kind = "nan";
    a.at = S(t);
    a.observed = S(t + 0.1);
    a.detail = "nan at step " + std::to_string(step);
    return Do(a);
  }
  Lines Report(const MachineId& m, double t, const std::string& hash = "good", bool compute_ok = true) {
    DiagnosticsReported d;
    d.incident = Last().id;
    d.machine = m;
    d.results = {{"compute", compute_ok, compute_ok ? "" : "wrong GEMM", 80}, {"device", true, "", 1},
                 {"alignment", true, "", 900}};
    d.alignment_hash = hash;
    d.observed = S(t);
    return Do(d);
  }
  const Incident& Last() const { return controller->incidents().back(); }
  const LadderStatus& ladder() const { return controller->state().ladder; }
  std::optional<Controller> controller;
};

TEST(LadderPolicy, ANanThatComesBackIsDiagnosedAndTheMisalignedMachineEvicted) {
  LadderJob j;
  EXPECT_EQ(j.Nan(11, 11), (Lines{"restart_all g2 m01,m02,m03,m04 ckpt 0"})) << "first: a plain reattempt";
  j.Do(StepCompleted{10, S(14)});
  EXPECT_EQ(j.Nan(11, 15), (Lines{"diagnose i2 compute,device,alignment"}));
  EXPECT_EQ(j.ladder().state, LadderState::kDiagnosing);
  // While the ranks are stopped for the tests, their silence is no hang and
  // their exits no crash.
  EXPECT_TRUE(j.Do(HangSuspected{10, S(14), Secs(2), false, S(17)}).empty());
  EXPECT_TRUE(j.Do(RankExited{"m02", 1, 1, 0, "", S(17)}).empty());
  EXPECT_TRUE(j.Report("m01", 18).empty());
  EXPECT_TRUE(j.Report("m02", 18.5).empty());
  EXPECT_TRUE(j.Report("m03", 19, "bad").empty());
  EXPECT_EQ(j.Report("m04", 19.5), (Lines{"evict m03", "activate s01", "restart_all g3 m01,m02,s01,m04 ckpt 0"}));
  const Incident& inc = j.Last();
  EXPECT_EQ(inc.evicted, (std::vector<MachineId>{"m03"}));
  ASSERT_EQ(inc.rungs.size(), 1u);
  EXPECT_EQ(inc.rungs[0].rung, "diagnose");
  EXPECT_EQ(inc.rungs[0].started, S(15.1));
  EXPECT_EQ(inc.rungs[0].ended, S(19.5));
  EXPECT_NE(inc.rungs[0].outcome.find("m03: alignment hash"), std::string::npos) << inc.rungs[0].outcome;
  EXPECT_EQ(j.ladder().state, LadderState::kWatching);
  // Settles once settle_steps steps past the NaN's step complete.
  for (int k = 10; k <= 16; ++k) j.Do(StepCompleted{k, S(20 + k)});
  EXPECT_EQ(j.ladder().state, LadderState::kWatching) << "step 16 is not past 11 + 5";
  j.Do(StepCompleted{17, S(37)});
  EXPECT_EQ(j.ladder().state, LadderState::kIdle);
}

TEST(LadderPolicy, StepsTrailingTheStopForDiagnosticsDoNotEndTheEpisode) {
  LadderJob j;
  j.Nan(11, 11);
  j.Nan(11, 15);  // before any step of the reattempt: still incident 1
  ASSERT_EQ(j.ladder().state, LadderState::kDiagnosing);
  EXPECT_TRUE(j.Do(StepCompleted{10, S(16)}).empty());
  EXPECT_FALSE(j.Last().closed) << "a stopped rank's late report is no recovery";
  EXPECT_EQ(j.Do(LadderDeadline{1, S(75.2)}), (Lines{"diagnose i1 replay"})) << "nobody answered: inconclusive, climb on";
}

TEST(LadderPolicy, AMachineSilentPastTheBudgetFailsAndLateAnswersAreKeptOut) {
  LadderJob j;
  j.Nan(11, 11);
  j.Do(StepCompleted{10, S(14)});
  j.Nan(11, 15);
  j.Report("m01", 18);
  j.Report("m02", 18);
  j.Report("m03", 18);
  EXPECT_TRUE(j.Do(LadderDeadline{2, S(60)}).empty()) << "before the budget: nothing";
  EXPECT_EQ(j.Do(LadderDeadline{2, S(75.2)}), (Lines{"evict m04", "activate s01", "restart_all g3 m01,m02,m03,s01 ckpt 0"}));
  EXPECT_NE(j.Last().rungs[0].outcome.find("m04: no answer within 1min"), std::string::npos) << j.Last().rungs[0].outcome;
  EXPECT_TRUE(j.Report("m04", 80).empty());
}

TEST(LadderPolicy, AllPassRollsBackToNothingThenReplayNamesTheIntersection) {
  LadderJob j(/*pp=*/2);  // slots: stage 0 = m01,m02; stage 1 = m03,m04
  j.Nan(11, 11);
  j.Do(StepCompleted{10, S(14)});
  j.Nan(11, 15);
  for (const char* m : {"m01", "m02", "m03"}) j.Report(m, 18);
  std::vector<Action> acts;
  {
    DiagnosticsReported d{2, "m04", {{"compute", true, "", 80}}, "good", S(19)};
    acts = j.Act(d);
  }
  ASSERT_EQ(Briefs(acts), (Lines{"diagnose i2 replay"})) << "reattempt was spent before the ladder";
  const Action& replay = acts[0];
  EXPECT_EQ(replay.group_names, (std::vector<std::string>{"h0", "h1", "v0", "v1"}));
  EXPECT_EQ(replay.groups[1], (std::vector<MachineId>{"m03", "m04"}));
  EXPECT_EQ(replay.groups[2], (std::vector<MachineId>{"m01", "m03"}));
  const Incident& inc = j.Last();
  ASSERT_EQ(inc.rungs.size(), 3u);
  EXPECT_EQ(inc.rungs[1].rung, "rollback");
  EXPECT_EQ(inc.rungs[1].outcome, "no earlier release: nothing to roll back");
  EXPECT_EQ(inc.rungs[2].rung, "replay");

  DiagnosticsReported r{2, "m01", {{"replay/h0", true, "", 5000}, {"replay/h1", false, "diverged at step 3", 5000}}, "", S(40)};
  EXPECT_TRUE(j.Do(r).empty()) << "two groups still to report";
  r.results = {{"replay/v0", true, "", 5000}, {"replay/v1", false, "diverged at step 2", 5000}};
  r.observed = S(45);
  EXPECT_EQ(j.Do(r), (Lines{"evict m04", "activate s01", "restart_all g3 m01,m02,m03,s01 ckpt 0"}));
  EXPECT_EQ(j.Last().rungs[2].outcome, "culprit m04 (h1 x v1)");
  EXPECT_EQ(j.Last().rungs[2].ended, S(45));
}

TEST(LadderPolicy, AfterAnUpdateTheRollbackRungReturnsToThePreviousRelease) {
  LadderJob j;
  // The job was updated in place (release 2) and ran on.
  EXPECT_EQ(j.Do(ReleaseCreated{2, true, "new loss scaling", S(10.5)}), (Lines{"stage r2"}));
  for (const char* m : {"m01", "m02", "m03"}) j.Do(ReleaseStaged{m, 2, true, "", S(10.6)});
  EXPECT_EQ(j.Do(ReleaseStaged{"m04", 2, true, "", S(10.7)}), (Lines{"restart_all g2 m01,m02,m03,m04 ckpt 0 r2"}));
  j.Do(StepCompleted{11, S(11)});
  j.Nan(12, 12);  // first: a plain reattempt (g3)
  j.Do(StepCompleted{11, S(14)});
  j.Nan(12, 15);  // again: diagnose
  for (const char* m : {"m01", "m02", "m03"}) j.Report(m, 18);
  EXPECT_EQ(j.Report("m04", 19), (Lines{"restart_all g4 m01,m02,m03,m04 ckpt 0"}))
      << "every machine passed and reattempt was spent: back to release 1";
  const Incident& inc = j.Last();
  ASSERT_EQ(inc.rungs.size(), 2u);
  EXPECT_EQ(inc.rungs[1].rung, "rollback");
  EXPECT_EQ(inc.rungs[1].outcome, "rolled back release 2 -> 1");
  EXPECT_EQ(inc.resolution, Resolution::kRolledBack);
  EXPECT_EQ(j.ladder().state, LadderState::kWatching) << "it watches the rolled-back release like a reattempt";
  // The fault comes back on release 1 too: the next rung (replay).
  j.Do(StepCompleted{11, S(21)});
  EXPECT_EQ(j.Nan(12, 22), (Lines{"diagnose i4 replay"}));
}

TEST(LadderPolicy, NothingFoundAnywhereStopsTheJobAsDeterministic) {
  LadderJob j;  // pp=1, DP=4: k=2 gives 2 horizontal and 2 vertical groups
  j.Nan(11, 11);
  j.Do(StepCompleted{10, S(14)});
  j.Nan(11, 15);
  for (const char* m : {"m01", "m02", "m03"}) j.Report(m, 18);
  EXPECT_EQ(j.Report("m04", 19), (Lines{"diagnose i2 replay"}));
  DiagnosticsReported r{2, "m01", {{"replay/h0", true, "", 1}, {"replay/h1", true, "", 1}}, "", S(30)};
  EXPECT_TRUE(j.Do(r).empty());
  r.results = {{"replay/v0", true, "", 1}, {"replay/v1", true, "", 1}};
  r.observed = S(31);
  EXPECT_EQ(j.Do(r), (Lines{"stop"}));
  const Incident& inc = j.Last();
  EXPECT_EQ(inc.resolution, Resolution::kStopped);
  EXPECT_NE(inc.why.find("deterministic"), std::string::npos) << inc.why;
  ASSERT_EQ(inc.rungs.size(), 3u);
  EXPECT_EQ(inc.rungs[2].outcome, "no single culprit (failing groups: none)");
  EXPECT_TRUE(inc.evicted.empty());
  EXPECT_EQ(j.ladder().state, LadderState::kIdle);
}

TEST(LadderPolicy, ALayoutWithoutTwoByTwoGroupsRecordsThatItCannotReplay) {
  PolicyConfig c;
  c.ladder.replay_k = 1;  // pp=1: m = 1 horizontal group
  LadderJob j(1, c);
  j.Nan(11, 11);
  j.Do(StepCompleted{10, S(14)});
  j.Nan(11, 15);
  for (const char* m : {"m01", "m02", "m03"}) j.Report(m, 18);
  EXPECT_EQ(j.Report("m04", 19), (Lines{"stop"}));
  EXPECT_NE(j.Last().rungs[2].outcome.find("cannot replay"), std::string::npos) << j.Last().rungs[2].outcome;
}

TEST(Ladder, FlagsAsBulwarkUpTakesThem) {
  LadderConfig c;
  EXPECT_TRUE(ApplyLadderFlags("diagnose,replay", "compute,device", "30", &c).ok());
  EXPECT_EQ(c.rungs, (std::vector<std::string>{"diagnose", "replay"}));
  EXPECT_EQ(c.tests, (std::vector<std::string>{"compute", "device"}));
  EXPECT_EQ(c.diagnose_budget, Secs(30));
  LadderConfig none;
  EXPECT_TRUE(ApplyLadderFlags("none", "", "", &none).ok());
  EXPECT_TRUE(none.rungs.empty());
  LadderConfig bad;
  Status st = ApplyLadderFlags("diagnose,prayer", "", "", &bad);
  EXPECT_EQ(st.message(), "policy: ladder rung 'prayer' is unknown; use diagnose, reattempt, rollback or replay");
  EXPECT_FALSE(ApplyLadderFlags("", "", "0", &bad).ok()) << "a zero budget";
  EXPECT_FALSE(ApplyLadderFlags("", "", "soon", &bad).ok());
}

// Links of one round share no machine, so they run at once; every link
// comes after its ends' earlier links in the one order (no deadlock).
TEST(LadderPolicy, NetworkLinksRunInRoundsOfLinksThatShareNoMachine) {
  for (int n = 2; n <= 9; ++n) {
    std::vector<MachineId> machines;
    for (int i = 0; i < n; ++i) machines.push_back("m" + std::to_string(i));
    const NetworkLinkMap links = NetworkLinks(machines);
    std::map<int, std::set<MachineId>> in_round;
    for (const auto& [name, ends] : links) {
      const int round = NetworkLinkRound(NetworkLinkIndex(name), static_cast<int>(links.size()));
      EXPECT_LE(round, n % 2 == 1 && n > 2 ? 2 : 1) << n << " machines, " << name;
      for (const MachineId& m : ends) {
        EXPECT_TRUE(in_round[round].insert(m).second) << n << " machines: " << m << " twice in round " << round;
      }
    }
  }
}

TEST(LadderPolicy, TheNetworkTestSendsTheRingsLinksInTheOrderAgentsRunThem) {
  PolicyConfig c;
  c.ladder.tests = {"compute", "network"};
  LadderJob j(1, c);
  j.Nan(11, 11);
  j.Do(StepCompleted{10, S(14)});
  std::vector<Action> acts;
  {
    TrainingAnomaly a;
    a.step = 11;
    a.kind = "nan";
    a.at = S(15);
    a.observed = S(15.1);
    acts = j.Act(a);
  }
  ASSERT_EQ(Briefs(acts), (Lines{"diagnose i2 compute,network"}));
  // The even links at once, then the odd ones.
  EXPECT_EQ(acts[0].group_names, (std::vector<std::string>{"net0", "net2", "net1", "net3"}));
  EXPECT_EQ(acts[0].groups[3], (std::vector<MachineId>{"m04", "m01"}));
  // m02's two links are slow: m02 is evicted.
  const std::map<MachineId, std::vector<DiagnosticResult>> results = {
      {"m01", {{"compute", true, "", 80}, {"network/net0", true, "", 900}}},
      {"m02", {{"compute", true, "", 80}, {"network/net1", true, "", 950}}},
      {"m03", {{"compute", true, "", 80}, {"network/net2", true, "", 60}}},
      {"m04", {{"compute", true, "", 80}, {"network/net3", true, "", 55}}}};
  Lines last;
  for (const auto& [m, rs] : results) last = j.Do(DiagnosticsReported{2, m, rs, "", S(20)});
  EXPECT_EQ(last, (Lines{"evict m02", "activate s01", "restart_all g3 m01,s01,m03,m04 ckpt 0"}));
  EXPECT_NE(j.Last().rungs[0].outcome.find("m02: network link net0 (m01-m02) took 900 ms"), std::string::npos)
      << j.Last().rungs[0].outcome;
}

// Steps slowed while compute held (FailSlowDetector::CheckLinks): the
// links are measured, whatever tests the diagnose rung has, and the
// machine on the slow ones is evicted; links all alike restart in place.
TEST(LadderPolicy, StepsSlowedWithComputeHoldingMeasureTheLinks) {
  LadderJob j;
  FailSlowSuspected slowed{"", 5, 3.0, "steps at 3.00x the job's best, 0% of the added time in compute, 5 rounds: "
                           "the network is slower", S(20)};
  slowed.network = true;
  EXPECT_EQ(j.Do(slowed), (Lines{"diagnose i1 network"}));
  EXPECT_EQ(j.ladder().state, LadderState::kDiagnosing);
  EXPECT_NE(j.Last().cause.find("the network is slower"), std::string::npos) << j.Last().cause;
  EXPECT_TRUE(j.Do(slowed).empty()) << "one check at a time";
  const std::map<MachineId, std::vector<DiagnosticResult>> results = {
      {"m01", {{"network/net0", true, "", 50}}},
      {"m02", {{"network/net1", true, "", 900}}},
      {"m03", {{"network/net2", true, "", 950}}},
      {"m04", {{"network/net3", true, "", 55}}}};
  Lines last;
  for (const auto& [m, rs] : results) last = j.Do(DiagnosticsReported{1, m, rs, "", S(22)});
  EXPECT_EQ(last, (Lines{"evict m03", "activate s01", "restart_all g2 m01,m02,s01,m04 ckpt 0"}));
  for (int k = 11; k <= 17; ++k) j.Do(StepCompleted{k, S(30 + k)});
  EXPECT_EQ(j.ladder().state, LadderState::kIdle);

  slowed.observed = S(60);
  EXPECT_EQ(j.Do(slowed), (Lines{"diagnose i2 network"}));
  Lines clean;
  const std::map<MachineId, std::string> first_of = {{"m01", "net0"}, {"m02", "net1"}, {"s01", "net2"}, {"m04", "net3"}};
  for (const auto& [m, link] : first_of) clean = j.Do(DiagnosticsReported{2, m, {{"network/" + link, true, "", 50}}, "", S(62)});
  EXPECT_EQ(clean, (Lines{"restart_all g3 m01,m02,s01,m04 ckpt 0"}));
  EXPECT_EQ(j.Last().resolution, Resolution::kReattempt);
  EXPECT_NE(j.Last().why.find("network check"), std::string::npos) << j.Last().why;

  PolicyConfig no_ladder;
  no_ladder.ladder.rungs.clear();
  LadderJob plain(1, no_ladder);
  slowed.observed = S(20);
  EXPECT_TRUE(plain.Do(slowed).empty()) << "without a ladder: a note";
  EXPECT_EQ(plain.controller->state().notes.size(), 1u);
}

TEST(LadderPolicy, WithoutALadderARepeatStopsAtOnceAsBefore) {
  PolicyConfig c;
  c.ladder.rungs.clear();
  LadderJob j(1, c);
  j.Nan(11, 11);
  j.Do(StepCompleted{10, S(14)});
  EXPECT_EQ(j.Nan(11, 15), (Lines{"stop"}));
}

TEST(LadderPolicy, TheFaultComingBackAfterTheLaddersEvictionClimbsOn) {
  LadderJob j(/*pp=*/2);
  j.Nan(11, 11);
  j.Do(StepCompleted{10, S(14)});
  j.Nan(11, 15);
  for (const char* m : {"m01", "m02", "m04"}) j.Report(m, 18);
  EXPECT_EQ(j.Report("m03", 19, "good", /*compute_ok=*/false)[0], "evict m03");
  j.Do(StepCompleted{10, S(24)});
  // The same NaN on the new machines: diagnose was climbed, reattempt spent,
  // so rollback (nothing) and the replay.
  EXPECT_EQ(j.Nan(11, 25), (Lines{"diagnose i3 replay"}));
  const Incident& inc = j.Last();
  ASSERT_EQ(inc.rungs.size(), 2u);
  EXPECT_EQ(inc.rungs[0].rung, "rollback");
  EXPECT_NE(inc.notes.back().find("came back"), std::string::npos) << inc.notes.back();
}

TEST(LadderPolicy, UnsignedCrashesThatWouldStopAsALoopClimbTheLadderInstead) {
  LadderJob j;
  j.Do(RankExited{"m01", 0, 1, 0, "", S(20)});
  j.Do(RankExited{"m02", 1, 1, 0, "", S(30)});
  EXPECT_EQ(j.Do(RankExited{"m03", 2, 1, 0, "", S(40)}), (Lines{"diagnose i1 compute,device,alignment"}));
  EXPECT_EQ(j.ladder().state, LadderState::kDiagnosing);
  // A signed crash loop still stops at once.
  LadderJob k;
  k.Do(RankExited{"m01", 0, 1, 0, "oom", S(20)});
  k.Do(RankExited{"m02", 1, 1, 0, "", S(30)});
  EXPECT_EQ(k.Do(RankExited{"m03", 2, 1, 0, "oom", S(40)}), (Lines{"stop"}));
}

}  // namespace
}  // namespace bulwark::controller
