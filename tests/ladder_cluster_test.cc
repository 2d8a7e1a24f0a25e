// The stop-time ladder end to end: a real local cluster runs the tiny
// trainer on four machines, one of which starts corrupting its matmuls
// silently (`bulwark inject sdc`). Only the cause is emulated (the
// trainer's SDC hook, sdc.h); everything after it is the real path: the
// NaN with no culprit, the reattempt that brings it back at the same step,
// the ladder stopping the job for diagnostics, every agent's GEMM check,
// device check and `bulwark-train --align` run, the hash that disagrees
// with the majority, the eviction and the standby swap.
#include <gtest/gtest.h>

#include <algorithm>

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
  std::vector<std::string> rungs;
  for (const json& r : inc["ladder"]) {
    rungs.push_back(r["rung"]);
    std::printf("[ timing ] %-9s %.3f s: %s\n", r["rung"].get<std::string>().c_str(), r.value("seconds", -1.0),
                r["outcome"].get<std::string>().c_str());
  }
  EXPECT_EQ(rungs, (std::vector<std::string>{"diagnose", "rollback", "replay"})) << inc.dump();
  EXPECT_EQ(inc["ladder"][2]["outcome"], "culprit m03 (h1 x v0)") << inc.dump();
}

TEST_F(Ladder, ABadLadderConfigurationIsAOneLineErrorAtStart) {
  for (const auto& [flags, hint] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--ladder-rungs", "diagnose,pray"}, "rung 'pray' is unknown"},
           {{"--ladder-budget", "0"}, "must be positive"},
           {{"--ladder-tests", "compute,network"}, "test 'network' is unknown"}}) {
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
