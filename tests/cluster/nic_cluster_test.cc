// The agents watch real network interfaces (`bulwark up --nics`): each
// machine gets one end of a veth pair that the test creates, and the test
// takes the other end down and up with `ip link`, as a switch port or a
// cable would. The agents read only the kernel (sysfs); nothing writes the
// emulated link files. Needs root (CI runs as root); skipped otherwise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "support/cluster_fixture.h"

namespace bulwark {
namespace {

bool Ip(const std::string& args) { return std::system(("ip " + args + " >/dev/null 2>&1").c_str()) == 0; }

class Nics : public Cluster {
 protected:
  void SetUp() override {
    Cluster::SetUp();
    const std::string tag = "bw" + std::to_string(::getpid() % 100000);
    for (int i = 0; i < 3; ++i) {
      // The machine's end (watched by its agent) and the far end (the switch's).
      const std::string mine = tag + "m" + std::to_string(i), far = tag + "f" + std::to_string(i);
      if (::geteuid() != 0 || !Ip("link add " + mine + " type veth peer name " + far)) {
        GTEST_SKIP() << "needs root and `ip link add ... type veth` (CI runs as root)";
      }
      mine_.push_back(mine);
      far_.push_back(far);
      ASSERT_TRUE(Ip("link set " + mine + " up") && Ip("link set " + far + " up"));
    }
  }
  void TearDown() override {
    Cluster::TearDown();
    for (const std::string& m : mine_) Ip("link del " + m);  // takes its peer with it
  }
  // Lines of m's agent log that hold `needle`.
  int LogCount(const std::string& machine, const std::string& needle) {
    std::ifstream in(dir_ + "/machines/" + machine + "/agent.log");
    int n = 0;
    for (std::string line; std::getline(in, line);) n += line.find(needle) != std::string::npos;
    return n;
  }
  std::vector<std::string> mine_, far_;
};

// A link that goes down for real raises the NIC rule's first alert; a flap
// shorter than an inspection, seen only by the kernel's carrier counter,
// raises the second, and the second within the window evicts the machine:
// the standby takes its place.
TEST_F(Nics, TheKernelsLinkStateDrivesTheNicRule) {
  auto up = Bulwark({"up", "--machines", "2", "--standby", "1", "--nics", mine_[0] + "," + mine_[1] + "," + mine_[2]});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  WriteJob(2);
  auto sub = Bulwark({"submit", root_ + "/job.yaml"});
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  WaitFor("first steps", 60, [](const json& s) { return s["job"]["last_step"] >= 10; });

  // m02's link loses its carrier until its agent has seen it.
  ASSERT_TRUE(Ip("link set " + far_[1] + " down"));
  WaitFor("m02's agent sees its link down", 10, [&](const json&) { return LogCount("m02", "link down on m02") > 0; });
  ASSERT_TRUE(Ip("link set " + far_[1] + " up"));
  WaitFor("m02's link back up", 10, [&](const json&) {
    std::ifstream in("/sys/class/net/" + mine_[1] + "/operstate");
    std::string state;
    in >> state;
    return state == "up";
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // an inspection sees it up again

  // Down and up again at once: no inspection sees it down.
  inject_ms_ = NowMs();
  ASSERT_TRUE(Ip("link set " + far_[1] + " down") && Ip("link set " + far_[1] + " up"));
  json s = WaitFor("m02 evicted and replaced", 30, [&](const json& s) {
    return MachineState(s, "m02") == "evicted" && s["job"]["placement"] == json({"m01", "m03"}) &&
           s["job"]["state"] == "running";
  });
  Report("link x2");
  EXPECT_EQ(LogCount("m02", "network alert: link down on m02: " + mine_[1] + " down (operstate lowerlayerdown"), 1);
  EXPECT_EQ(LogCount("m02", "network alert: link flapped on m02"), 1);
  const std::string cause = Query("incidents").back()["cause"];
  EXPECT_NE(cause.find("2 network alerts on m02 within 5min: link flapped on m02"), std::string::npos) << cause;
  // Nothing went through the emulated link files.
  std::ifstream emulated(dir_ + "/machines/m02/health/nic");
  std::string state;
  emulated >> state;
  EXPECT_NE(state, "down");
}

}  // namespace
}  // namespace bulwark
