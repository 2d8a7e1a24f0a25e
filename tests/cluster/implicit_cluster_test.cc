// Implicit faults end to end: a real local cluster runs the tiny trainer on
// four machines while a hang, a NaN and a slow machine are injected; only
// the cause is emulated (inside the rank through its test hook, or by the
// agent throttling the machine), everything after it is the real path:
// step signals, detectors, stack capture with eu-stack, the analyzer, the
// eviction, the standby swap and the in-memory restore.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "support/cluster_fixture.h"

namespace bulwark {
namespace {

class Implicit : public Cluster {
 protected:
  // Four machines of one rank each, two standbys, training; `up_flags`
  // add to up's (a --policy file).
  json Start(const std::vector<std::string>& up_flags = {}) {
    std::vector<std::string> up_args = {"up", "--machines", "4", "--standby", "2"};
    up_args.insert(up_args.end(), up_flags.begin(), up_flags.end());
    auto up = Bulwark(up_args);
    EXPECT_EQ(up.exit_code, 0) << up.err;
    WriteJob(4);
    auto sub = Bulwark({"submit", root_ + "/job.yaml"});
    EXPECT_EQ(sub.exit_code, 0) << sub.err;
    return WaitFor("first steps", 60, [](const json& s) { return s["job"]["last_step"] >= 40; });
  }

  json InjectAndWaitForEviction(const std::vector<std::string>& inject, const std::string& victim, double seconds) {
    json s = Query("status");
    const int64_t gen = s["job"]["generation"];
    std::vector<std::string> args = {"inject"};
    args.insert(args.end(), inject.begin(), inject.end());
    inject_ms_ = NowMs();
    auto r = Bulwark(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return WaitFor("eviction of " + victim, seconds, [&](const json& s) {
      return s["job"]["generation"] > gen && s["job"]["state"] == "running" && EvictedByAnIncident(victim);
    });
  }
};

TEST_F(Implicit, HangInACollectiveIsTracedAndItsMachineEvicted) {
  Start();
  json s = InjectAndWaitForEviction({"hang", "--machine", "m03", "--where", "collective"}, "m03", 60);
  Report("hang");
  json inc = Query("incidents").back();
  EXPECT_EQ(inc["class"], "implicit");
  EXPECT_EQ(inc["evicted"], json({"m03"})) << inc.dump();
  EXPECT_EQ(inc["lost_steps"], 0) << inc.dump();
  // Detected within the allowance it had then (5x the learned step time, at
  // least 2 s; the first steps of a suite's first cluster run on a cold host
  // are slow, so it is read from the incident, not from before the
  // injection) plus a report period and a tick; localized in well under 3 s.
  const std::string cause = inc["cause"].get<std::string>();
  const size_t at = cause.find("(allowance ");
  ASSERT_NE(at, std::string::npos) << cause;
  const double allowance = std::stod(cause.substr(at + 11));
  EXPECT_GE(allowance, 2.0);
  EXPECT_LT(inc["detect_s"].get<double>(), allowance + 1.0) << inc.dump();
  EXPECT_LT(inc["localize_s"].get<double>(), 3.0) << inc.dump();
  ASSERT_TRUE(inc.contains("stacks")) << inc.dump();
  const json& groups = inc["stacks"]["groups"];
  ASSERT_EQ(groups.size(), 2u) << inc.dump();
  EXPECT_EQ(groups[0]["ranks"], json({0, 1, 3}));
  EXPECT_NE(groups[0]["stack"].get<std::string>().find("AllReduceSum"), std::string::npos) << groups.dump();
  EXPECT_NE(groups[1]["stack"].get<std::string>().find("RecvNeverSent"), std::string::npos) << groups.dump();
  // Raw stacks for people.
  std::ifstream raw(dir_ + "/stacks/incident-1/rank-2.txt");
  EXPECT_TRUE(raw.good());
  // The standby took m03's slot and the job trains on.
  EXPECT_EQ(s["job"]["placement"][2], "m05");
}

TEST_F(Implicit, NanOnOneMachineEvictsItAtTheStepItAppears) {
  Start();
  InjectAndWaitForEviction({"nan", "--machine", "m02"}, "m02", 40);
  Report("nan");
  json inc = Query("incidents").back();
  EXPECT_EQ(inc["class"], "implicit");
  EXPECT_EQ(inc["evicted"], json({"m02"})) << inc.dump();
  EXPECT_NE(inc["cause"].get<std::string>().find("rank(s) 1 only"), std::string::npos) << inc.dump();
  // The bad step was held back: the restore is the step before it, nothing lost.
  EXPECT_EQ(inc["lost_steps"], 0) << inc.dump();
}

TEST_F(Implicit, LossSpikeWithNoCulpritReattemptsFromTheStepBefore) {
  json s = Start();
  const int64_t gen = s["job"]["generation"];
  inject_ms_ = NowMs();
  auto r = Bulwark({"inject", "loss-spike", "--machine", "m01"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  s = WaitFor("reattempt", 40, [&](const json& s) {
    return s["job"]["generation"] > gen && s["job"]["state"] == "running";
  });
  Report("loss-spike");
  EXPECT_EQ(s["job"]["placement"], json({"m01", "m02", "m03", "m04"})) << "nothing evicted";
  json inc = Query("incidents").back();
  EXPECT_EQ(inc["resolution"], "reattempt") << inc.dump();
  EXPECT_EQ(inc["lost_steps"], 0) << inc.dump();
}

// The demo's 2x. The cluster runs a policy file of 3 rounds of 5 s
// (ByteRobust's, and the default, is 5 of 10 s: bench/implicit measures
// that): the cause names the rounds the file gave, so the file reached the
// controller's detector. The slowdown the detector measured is at least
// 0.8x the one injected: four ranks share two cores here, and an emulation
// that measured the scheduler (it once read 1.17x for 2x) fails this test.
TEST_F(Implicit, ASlowMachineIsEvictedAfterTheRoundsItsPolicyFileGives) {
  std::ofstream(root_ + "/policy.yaml") << "slow_round: 5\nslow_rounds: 3\n";
  Start({"--policy", root_ + "/policy.yaml"});
  EXPECT_EQ(Query("status")["policy"], json({{"slow_round", 5.0}, {"slow_rounds", 3.0}}));
  InjectAndWaitForEviction({"slow", "--machine", "m04", "--factor", "2"}, "m04", 150);
  Report("slow");
  json inc = Query("incidents").back();
  EXPECT_EQ(inc["evicted"], json({"m04"})) << inc.dump();
  EXPECT_NE(inc["cause"].get<std::string>().find("3/3 rounds"), std::string::npos) << inc.dump();
  const double measured = MeasuredSlowFactor(inc);
  std::printf("[ figure ] slow --factor 2 on bulwark-train: m04 measured at %.2fx\n", measured);
  EXPECT_GE(measured, 0.8 * 2) << inc.dump();
}

TEST_F(Implicit, AMissingCommandStopsTheJobWithoutEvictingAnyMachine) {
  auto up = Bulwark({"up", "--machines", "1", "--standby", "1"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  std::ofstream(root_ + "/job.yaml") << "name: typo\nworld_size: 1\ncommand: [/nonexistent/bulwark-trian]\n";
  auto sub = Bulwark({"submit", root_ + "/job.yaml"});
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  json s = WaitFor("the job to stop", 30, [](const json& s) { return s["job"]["state"] == "stopped"; });
  EXPECT_EQ(MachineState(s, "m01"), "active");
  EXPECT_EQ(MachineState(s, "m02"), "standby");
  json inc = Query("incidents").back();
  EXPECT_TRUE(inc["evicted"].empty()) << inc.dump();
  EXPECT_NE(inc["why"].get<std::string>().find("command_not_found"), std::string::npos) << inc.dump();
}

// A hang in the job's own code: rank 1 blocks at step 40 on every start,
// whatever machine holds it (tests/fixtures/jobs/hang_at_step.py, a plain
// Python job with the client). The first hang evicts its machine (stack
// aggregation cannot know yet); the same hang at the same step on the
// standby that replaced it says the hang follows the job: the job stops,
// with no second eviction and the other standby kept. The machine evicted
// on suspicion passes its checkup (the alignment test runs bulwark-train's
// tiny model for a Python job) and is back in the pool.
TEST_F(Implicit, AHangThatFollowsTheJobEvictsAtMostOneMachineThenStops) {
  auto up = Bulwark({"up", "--machines", "3", "--standby", "2"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  const std::string barrier = root_ + "/barrier";
  ASSERT_EQ(::system(("mkdir -p " + barrier).c_str()), 0);
  std::ofstream(root_ + "/job.yaml") << "name: deadlock\nworld_size: 3\n"
                                     << "command: [/usr/bin/python3, " << BULWARK_FIXTURES << "/jobs/hang_at_step.py]\n"
                                     << "env: {PYTHONPATH: " << BULWARK_PYTHON_DIR << ", BARRIER_DIR: " << barrier
                                     << ", HANG_RANK: '1', HANG_STEP: '40', PYTHONUNBUFFERED: '1'}\n";
  auto sub = Bulwark({"submit", root_ + "/job.yaml"});
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  json s = WaitFor("the job to stop", 240, [](const json& s) { return s["job"]["state"] == "stopped"; });
  json incidents = Query("incidents");
  int evicted = 0;
  for (const json& i : incidents) evicted += static_cast<int>(i["evicted"].size());
  EXPECT_LE(evicted, 1) << incidents.dump();
  s = WaitFor("m02's checkup", 60, [](const json& s) { return MachineState(s, "m02") == "standby"; });
  for (const json& m : s["machines"]) {
    if (m["id"] == "m02") EXPECT_NE(m.value("reason", "").find("checkup passed"), std::string::npos) << m.dump();
  }
  const json& last = incidents.back();
  EXPECT_TRUE(last["evicted"].empty()) << last.dump();
  const std::string why = last["why"].get<std::string>();
  EXPECT_NE(why.find("follows the job, not the machine"), std::string::npos) << why;
  std::printf("[ deterministic hang ] %zu incident(s), %d machine(s) evicted: %s\n", incidents.size(), evicted,
              why.c_str());
}

TEST_F(Implicit, BadInjectionsAreOneLineErrors) {
  auto up = Bulwark({"up", "--machines", "1", "--standby", "0"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  for (const auto& [args, hint] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"inject", "slow", "--machine", "m01", "--factor", "1"}, "above 1"},
           {{"inject", "slow", "--machine", "m01", "--factor", "fast"}, "not a number"},
           {{"inject", "hang", "--machine", "m01", "--where", "gpu"}, "collective or compute"},
           {{"inject", "hang", "--machine", "m77"}, "m77"},
           {{"inject", "bitflip", "--machine", "m01"}, "unknown fault"},
           {{"inject", "sdc", "--machine", "m01", "--mode", "flip"}, "use nan or drift"},
           {{"inject", "sdc", "--machine", "m01", "--rate", "2"}, "not a probability"},
           {{"inject", "nan", "--machine", "m01", "--mode", "drift"}, "apply to sdc only"}}) {
    auto r = Bulwark(args);
    EXPECT_NE(r.exit_code, 0) << args[1];
    EXPECT_NE(r.err.find(hint), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

}  // namespace
}  // namespace bulwark
