// The stop-time ladder end to end: a real local cluster runs the tiny
// trainer on four machines, one of which starts corrupting its matmuls
// silently (`bulwark inject sdc`). Only the cause is emulated (the
// trainer's SDC hook, sdc.h); everything after it is the real path: the
// NaN with no culprit, the reattempt that brings it back at the same step,
// the ladder stopping the job for diagnostics, every agent's GEMM check,
// device check and `bulwark-train --align` run, the hash that disagrees
// with the majority, the eviction and the standby swap.
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "cluster/local/local_cluster.h"
#include "support/cluster_fixture.h"

namespace bulwark {
namespace {

class Ladder : public Cluster {};

TEST_F(Ladder, AnSdcMachineIsFoundByBitwiseAlignmentAndEvicted) {
  auto up = Bulwark({"up", "--machines", "4", "--standby", "2"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  WriteJob(4);
  auto sub = Bulwark({"submit", root_ + "/job.yaml"});
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  json s = WaitFor("first steps", 60, [](const json& s) { return s["job"]["last_step"] >= 20; });
  const int64_t gen = s["job"]["generation"];

  // Bad input is a one-line error and injects nothing.
  auto bad = Bulwark({"inject", "sdc", "--machine", "m03", "--mode", "flip"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("use nan or drift"), std::string::npos) << bad.err;

  Inject("sdc", "m03");
  s = WaitFor("eviction of m03", 90, [&](const json& s) {
    return MachineState(s, "m03") == "evicted" && s["job"]["generation"] > gen && s["job"]["state"] == "running";
  });
  Report("sdc");
  json incidents = Query("incidents");
  ASSERT_TRUE(incidents.is_array() && !incidents.empty()) << incidents.dump();
  const json& inc = incidents.back();
  EXPECT_EQ(inc["evicted"], json({"m03"})) << inc.dump();
  ASSERT_TRUE(inc.contains("ladder")) << inc.dump();
  const json& rung = inc["ladder"][0];
  EXPECT_EQ(rung["rung"], "diagnose");
  EXPECT_NE(rung["outcome"].get<std::string>().find("m03: alignment hash"), std::string::npos) << rung.dump();
  std::printf("[ timing ] diagnose rung %.3f s: %s\n", rung.value("seconds", -1.0), rung["outcome"].get<std::string>().c_str());
  EXPECT_EQ(s["job"]["placement"][2], "m05");

  // The text view shows the rung and its time.
  auto text = Bulwark({"incidents"});
  EXPECT_NE(text.out.find("ladder diagnose"), std::string::npos) << text.out;
}

// With alignment left out of the tests, diagnostics find nothing; the
// reattempt was spent before the ladder, there is no release to roll back
// to, and dual-phase replay runs the job's model on 2 horizontal groups
// ({m01,m02}, {m03,m04}) and 2 vertical ones ({m01,m03}, {m02,m04}): the
// two that hold m03 diverge, and m03 is the only machine in both.
TEST_F(Ladder, WithoutAlignmentDualPhaseReplayFindsTheSdcMachine) {
  auto up = Bulwark({"up", "--machines", "4", "--standby", "2", "--ladder-tests", "compute,device"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  WriteJob(4);
  auto sub = Bulwark({"submit", root_ + "/job.yaml"});
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  json s = WaitFor("first steps", 60, [](const json& s) { return s["job"]["last_step"] >= 20; });
  const int64_t gen = s["job"]["generation"];
  Inject("sdc", "m03");
  s = WaitFor("eviction of m03", 120, [&](const json& s) {
    return MachineState(s, "m03") == "evicted" && s["job"]["generation"] > gen && s["job"]["state"] == "running";
  });
  Report("sdc-replay");
  json inc = Query("incidents").back();
  EXPECT_EQ(inc["evicted"], json({"m03"})) << inc.dump();
  ASSERT_TRUE(inc.contains("ladder")) << inc.dump();
  const std::vector<std::string> rungs = LadderRungs(inc);
  EXPECT_EQ(rungs, (std::vector<std::string>{"diagnose", "rollback", "replay"})) << inc.dump();
  EXPECT_EQ(inc["ladder"][2]["outcome"], "culprit m03 (h1 x v0)") << inc.dump();
}

// The newest incident that evicted `machine`, or null.
json IncidentEvicting(const json& incidents, const std::string& machine) {
  if (!incidents.is_array()) return json();
  for (auto it = incidents.rbegin(); it != incidents.rend(); ++it) {
    for (const json& m : (*it).value("evicted", json::array())) {
      if (m == machine) return *it;
    }
  }
  return json();
}

// The network rung: m03's links are degraded (`inject slow-link`: its end
// of every pairwise all-reduce runs 20x slower; nothing else about the
// machine is wrong), and m01 corrupts silently, which is what makes a NaN
// with no culprit and starts the ladder. With only compute, device and
// network tests, the diagnose rung runs the ring's four links (real Gloo
// all-reduces between bulwark-train --net-check processes): net1 (m02-m03)
// and net2 (m03-m04) are the outliers, and m03, the machine they share, is
// evicted. m01's corruption then comes back and is the later rungs' to find.
TEST_F(Ladder, TheNetworkTestEvictsTheMachineOnTheOutlierLinks) {
  auto up = Bulwark({"up", "--machines", "4", "--standby", "2", "--ladder-tests", "compute,device,network"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  WriteJob(4);
  auto sub = Bulwark({"submit", root_ + "/job.yaml"});
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  json s = WaitFor("first steps", 60, [](const json& s) { return s["job"]["last_step"] >= 20; });
  auto bad = Bulwark({"inject", "slow-link", "--machine", "m03", "--factor", "1"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("must be above 1"), std::string::npos) << bad.err;
  auto slow = Bulwark({"inject", "slow-link", "--machine", "m03", "--factor", "20"});
  ASSERT_EQ(slow.exit_code, 0) << slow.err;
  Inject("sdc", "m01");
  json inc;
  WaitFor("eviction of m03 by the network test", 150, [&](const json& s) {
    if (MachineState(s, "m03") != "evicted") return false;
    inc = IncidentEvicting(Query("incidents"), "m03");
    return !inc.is_null();
  });
  ASSERT_FALSE(inc.is_null());
  ASSERT_TRUE(inc.contains("ladder")) << inc.dump();
  const json& rung = inc["ladder"][0];
  EXPECT_EQ(rung["rung"], "diagnose");
  const std::string outcome = rung["outcome"];
  std::printf("[ timing ] diagnose rung with the network test %.3f s: %s\n", rung.value("seconds", -1.0),
              outcome.c_str());
  EXPECT_NE(outcome.find("m03: network link net1 (m02-m03) took"), std::string::npos) << outcome;
  EXPECT_EQ(outcome.find("m02:"), std::string::npos) << "a neighbour on one slow link is not blamed: " << outcome;
  EXPECT_EQ(outcome.find("m04:"), std::string::npos) << outcome;
  EXPECT_EQ(inc["evicted"], json({"m03"})) << inc.dump();
}

// The periodic bitwise check (--ladder-align-every): `drift` corruption
// leaves every value finite and rarely makes a spike, so no detector opens
// an incident; every 10 s each machine runs the alignment test beside its
// ranks. Clean checks leave the job as it is (same generation, no
// incident), and the first check after the injection evicts m03.
TEST_F(Ladder, ThePeriodicBitwiseCheckFindsADriftingMachineBesideTheRanks) {
  auto up = Bulwark({"up", "--machines", "4", "--standby", "2", "--ladder-align-every", "10"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  WriteJob(4);
  auto sub = Bulwark({"submit", root_ + "/job.yaml"});
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  json s = WaitFor("a clean check", 120, [](const json& s) {
    return s["job"]["last_step"] >= 20 && s["job"]["align_check"]["clean"] >= 1;
  });
  const int64_t gen = s["job"]["generation"], step = s["job"]["last_step"];
  std::printf("[ timing ] clean check: %s\n", s["job"]["align_check"]["last"].get<std::string>().c_str());
  EXPECT_EQ(s["job"]["incidents"], 0) << s["job"].dump();
  EXPECT_EQ(s["job"]["state"], "running");
  const std::string text = Bulwark({"status"}).out;
  EXPECT_NE(text.find("bitwise check every 10 s:"), std::string::npos) << text;
  auto drift = Bulwark({"inject", "sdc", "--machine", "m03", "--mode", "drift"});
  ASSERT_EQ(drift.exit_code, 0) << drift.err;
  json inc;
  s = WaitFor("eviction of m03 by the periodic check", 150, [&](const json& s) {
    if (MachineState(s, "m03") != "evicted" || s["job"]["state"] != "running") return false;
    inc = IncidentEvicting(Query("incidents"), "m03");
    return !inc.is_null();
  });
  ASSERT_FALSE(inc.is_null());
  std::printf("[ timing ] %s\n", s["job"]["align_check"]["last"].get<std::string>().c_str());
  EXPECT_NE(inc["cause"].get<std::string>().find("periodic bitwise check"), std::string::npos) << inc.dump();
  EXPECT_NE(inc["why"].get<std::string>().find("m03: alignment hash"), std::string::npos) << inc.dump();
  EXPECT_FALSE(inc.contains("ladder")) << "a machine fault, no ladder: " << inc.dump();
  EXPECT_EQ(inc["evicted"], json({"m03"})) << inc.dump();
  // Only the eviction stopped the job: one incident, and the clean checks before it restarted nothing.
  const json all = Query("incidents");
  EXPECT_EQ(all.size(), 1u) << all.dump();
  EXPECT_GT(s["job"]["generation"].get<int64_t>(), gen);
  // The restart rolled back to the first check's start at the latest (the
  // drift entered after it), through the trainer's own --ckpt-dir here.
  EXPECT_NE(inc.dump().find("rolled back to step"), std::string::npos) << inc.dump();
  EXPECT_LE(s["job"]["generation"].get<int64_t>(), gen + 1) << "one restart";
  (void)step;
}

// The drift a periodic check finds has reached the weights through the
// gradient all-reduce since it began, after the last clean check started.
// So the restart that replaces the drifting machine rolls the job back:
// every copy newer than that check's step is discarded (memory, peers,
// durable storage), the ranks restore at most that step, and the run ends
// on the fault-free run's bits, as if m03 had never drifted.
TEST_F(Ladder, ADriftFoundByThePeriodicCheckIsRolledBackAndTheRunEndsBitwise) {
  constexpr int kSteps = 900;
  auto up = Bulwark({"up", "--machines", "3", "--standby", "1", "--ladder-align-every", "5"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  const std::vector<std::string> args = {"--config", "tiny", "--data", *data_, "--steps", std::to_string(kSteps),
                                         "--log-format", "json", "--threads", "1", "--dist-timeout", "10",
                                         "--eval-every", "0"};
  {
    std::ofstream job(root_ + "/job.yaml");
    job << "name: drift\nworld_size: 3\ncheckpoint: {persist_every: 10}\nargs: [";
    for (const std::string& a : args) job << "'" << a << "', ";
    job << "--memory-ckpt, 'on', --step-checksum]\nenv: {OMP_NUM_THREADS: '1'}\n";
  }
  auto sub = Bulwark({"submit", root_ + "/job.yaml"});
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  json s = WaitFor("a clean check", 120, [](const json& s) {
    return s["job"]["last_step"] >= 20 && s["job"]["align_check"]["clean"] >= 1;
  });
  ASSERT_LT(s["job"]["last_step"].get<int64_t>(), kSteps / 2) << "too fast for this test: " << s["job"].dump();
  auto drift = Bulwark({"inject", "sdc", "--machine", "m03", "--mode", "drift"});
  ASSERT_EQ(drift.exit_code, 0) << drift.err;
  const int64_t drift_from = Query("status")["job"]["last_step"];
  json inc;
  WaitFor("eviction of m03 by the periodic check", 120, [&](const json& s) {
    if (MachineState(s, "m03") != "evicted" || s["job"]["state"] != "running") return false;
    inc = IncidentEvicting(Query("incidents"), "m03");
    return !inc.is_null() && inc.contains("restored_step");
  });
  ASSERT_FALSE(inc.is_null());
  std::string rolled;
  for (const json& n : inc.value("notes", json::array())) {
    if (n.get<std::string>().rfind("rolled back to step", 0) == 0) rolled = n;
  }
  ASSERT_FALSE(rolled.empty()) << inc.dump();
  const int64_t cap = std::stoll(rolled.substr(std::string("rolled back to step ").size()));
  const int64_t restored = inc["restored_step"];
  std::printf("[ timing ] drift injected at step %lld; %s; restored step %lld; %s\n", static_cast<long long>(drift_from),
              rolled.c_str(), static_cast<long long>(restored), inc.value("summary", "").c_str());
  EXPECT_LE(cap, drift_from) << "the last clean check started before the drift";
  EXPECT_LE(restored, cap) << inc.dump();
  EXPECT_GT(restored, 0) << "a persisted step at or below the check's was kept for it: " << inc.dump();

  WaitFor("the end", 400, [](const json& j) { return j["job"].value("done_step", json()) == kSteps; });
  EXPECT_EQ(ChecksumAt(kSteps), ReferenceChecksum(args, 3)) << "the drift was rolled back";
}

// A controller killed as the ladder starts: the kill point fires right
// after the second NaN (the one that starts the diagnose rung) is
// journaled, before any DIAGNOSE one-shot was queued, so no agent got one
// from it. The restarted controller replays the journal, finds the
// diagnose rung in flight and sends the one-shots (an agent that had run
// the same id would ignore the repeat); every machine answers and the rung
// evicts m03 by its alignment hash. Before, the rung waited out its budget
// with nobody answering: inconclusive, and on to the later rungs.
TEST_F(Ladder, ARestartedControllerResendsTheDiagnosticsInFlight) {
  auto up = testing::Run({testing::BinDir() + "/bulwark", "up", "--machines", "4", "--standby", "2", "--dir", dir_},
                         {{"BULWARK_TEST_KILL_AT", "journaled:training_anomaly#2"}}, 60);
  ASSERT_EQ(up.exit_code, 0) << up.err;
  WriteJob(4);
  auto sub = Bulwark({"submit", root_ + "/job.yaml"});
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  WaitFor("first steps", 60, [](const json& s) { return s["job"]["last_step"] >= 20; });
  pid_t first = 0;
  std::ifstream(dir_ + "/controller.pid") >> first;
  ASSERT_GT(first, 0);
  Inject("sdc", "m03");
  // The controller dies at its kill point; wait for that, then start one.
  bool dead = false;
  for (int i = 0; i < 900 && !dead; ++i) {
    dead = !cluster::Running(first);
    if (!dead) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(dead) << "the controller never reached journaled:training_anomaly#2";
  controller_ = std::make_unique<testing::Process>(
      std::vector<std::string>{testing::BinDir() + "/bulwark", "controller", "--dir", dir_});
  json inc;
  WaitFor("eviction of m03 after the controller's restart", 150, [&](const json& s) {
    if (MachineState(s, "m03") != "evicted") return false;
    inc = IncidentEvicting(Query("incidents"), "m03");
    return !inc.is_null();
  });
  ASSERT_FALSE(inc.is_null());
  const json& rung = inc["ladder"][0];
  const std::string outcome = rung["outcome"];
  std::printf("[ timing ] diagnose rung across a controller restart %.3f s: %s\n", rung.value("seconds", -1.0),
              outcome.c_str());
  EXPECT_NE(outcome.find("m03: alignment hash"), std::string::npos) << outcome;
  EXPECT_EQ(outcome.find("no answer"), std::string::npos) << "every machine answered: " << outcome;
}

TEST_F(Ladder, ABadLadderConfigurationIsAOneLineErrorAtStart) {
  for (const auto& [flags, hint] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--ladder-rungs", "diagnose,pray"}, "rung 'pray' is unknown"},
           {{"--ladder-budget", "0"}, "must be positive"},
           {{"--ladder-tests", "compute,gpu-burn"}, "test 'gpu-burn' is unknown"},
           {{"--ladder-align-every", "hourly"}, "align-every 'hourly' is not a number"}}) {
    std::vector<std::string> args = {"up", "--machines", "1"};
    args.insert(args.end(), flags.begin(), flags.end());
    auto r = Bulwark(args);
    EXPECT_NE(r.exit_code, 0) << flags[0];
    EXPECT_NE(r.err.find(hint), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

}  // namespace
}  // namespace bulwark
