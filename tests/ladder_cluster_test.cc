// The stop-time ladder end to end: a real local cluster runs the tiny
// trainer on four machines, one of which starts corrupting its matmuls
// silently (`bulwark inject sdc`). Only the cause is emulated (the
// trainer's SDC hook, sdc.h); everything after it is the real path: the
// NaN with no culprit, the reattempt that brings it back at the same step,
// the ladder stopping the job for diagnostics, every agent's GEMM check,
// device check and `bulwark-train --align` run, the hash that disagrees
// with the majority, the eviction and the standby swap.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace bulwark
