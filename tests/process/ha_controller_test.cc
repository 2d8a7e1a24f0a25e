// Two `bulwark controller --etcd` processes over a real etcd member: one
// leads and the other says whom it follows; SIGKILL the leader and the other
// leads within the lease plus 2 s, and the cluster directory's address
// follows it. An agent and the CLI given both addresses, the follower's
// first, find the leader, and its successor after a SIGKILL. etcd gone and
// the leader stops acting and says so in status; etcd back and a controller
// leads again.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "plane/ha_controller.h"
#include "support/etcd_server.h"
#include "support/process.h"

namespace bulwark::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

class HaController : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    etcd_ = EtcdServer::Start(&why);
    ASSERT_NE(etcd_, nullptr) << why;
    const std::string token = "0123456789abcdef0123456789abcdef";
    const std::string root = MakeTempDir();
    for (const char* id : {"a", "b", "cluster", "fleet"}) {
      const std::string dir = root + "/" + id;
      ::mkdir(dir.c_str(), 0755);
      std::ofstream(dir + "/token") << token << "\n";
      ::chmod((dir + "/token").c_str(), 0600);
      // A port of its own, known before it leads, so a follower can answer
      // `status` there too.
      std::ofstream(dir + "/controller.addr") << "127.0.0.1:" << FreePort() << "\n";
      dirs_[id] = dir;
    }
    // The fleet's agents and CLI know every controller, the follower first,
    // and no single address: nothing rewrites it when the leader changes.
    ::remove((dirs_["fleet"] + "/controller.addr").c_str());
    std::ofstream(dirs_["fleet"] + "/controllers.addr") << Addr("b") << "\n" << Addr("a") << "\n";
  }
  std::string Addr(const std::string& id) {
    std::string a;
    std::ifstream(dirs_[id] + "/controller.addr") >> a;
    return a;
  }
  // Whether `s` is `leader`'s status with machine `m` heard within a second.
  static bool ServesFresh(const json& s, const std::string& leader, const std::string& m) {
    if (!Leads(s, leader)) return false;
    for (const json& x : s["machines"]) {
      if (x.value("id", "") == m && x.value("last_heard_s_ago", 99.0) < 1.0) return true;
    }
    return false;
  }
  std::unique_ptr<Process> Start(const std::string& id) {
    return std::make_unique<Process>(std::vector<std::string>{BinDir() + "/bulwark", "controller", "--init", "--etcd",
                                                              etcd_->endpoint(), "--etcd-lease", "2", "--dir",
                                                              dirs_[id], "--controller-id", id, "--cluster-dir",
                                                              dirs_["cluster"]});
  }
  json Status(const std::string& id) {
    ProcessResult r = testing::Run({BinDir() + "/bulwark", "status", "--json", "--dir", dirs_[id]}, {}, 10);
    return r.exit_code == 0 ? json::parse(r.out, nullptr, false) : json();
  }
  // Polls `id`'s status until `cond` holds or `seconds` pass.
  bool StatusWithin(const std::string& id, double seconds, const std::function<bool(const json&)>& cond) {
    const auto until = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < until) {
      if (json s = Status(id); s.is_object() && cond(s)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  static bool Leads(const json& s, const std::string& id) {
    return s.value("leader", json()) == id && s["ha"].value("role", "") == "leader";
  }

  std::unique_ptr<EtcdServer> etcd_;
  std::map<std::string, std::string> dirs_;
};

TEST_F(HaController, TheFollowerLeadsWithinTheLeasePlusTwoSecondsOfTheLeadersDeath) {
  auto a = Start("a");
  ASSERT_TRUE(StatusWithin("a", 15, [](const json& s) { return Leads(s, "a"); })) << Status("a").dump();
  EXPECT_TRUE(Leads(Status("cluster"), "a")) << Status("cluster").dump();
  auto b = Start("b");
  ASSERT_TRUE(StatusWithin("b", 15, [](const json& s) {
    return s["ha"].value("role", "") == "follower" && s.value("leader", json()) == "a";
  })) << Status("b").dump();
  ::kill(a->pid(), SIGKILL);
  const auto killed = Clock::now();
  ASSERT_TRUE(StatusWithin("b", 2 + 2, [](const json& s) { return Leads(s, "b"); })) << Status("b").dump();
  std::printf("[ ha] b led %.2f s after a was killed (2 s lease)\n",
              std::chrono::duration<double>(Clock::now() - killed).count());
  // The cluster's address, which agents and the CLI read, follows the leader.
  EXPECT_TRUE(Leads(Status("cluster"), "b")) << Status("cluster").dump();
}

TEST_F(HaController, AnAgentGivenEveryAddressFindsTheLeaderAndFollowsItAcrossAFailover) {
  auto a = Start("a");
  ASSERT_TRUE(StatusWithin("a", 15, [](const json& s) { return Leads(s, "a"); })) << Status("a").dump();
  auto b = Start("b");
  ASSERT_TRUE(StatusWithin("b", 15, [&](const json& s) {
    return s["ha"].value("role", "") == "follower" && s.value("leader_address", json()) == Addr("a");
  })) << "a follower names the leader and its address: " << Status("b").dump();
  Process agent({BinDir() + "/bulwark", "agent", "--machine", "m1", "--dir", dirs_["fleet"]});
  // The agent tries b first, is pointed at a, and reports there; the CLI,
  // given the same list, shows a's status.
  ASSERT_TRUE(StatusWithin("fleet", 20, [](const json& s) { return ServesFresh(s, "a", "m1"); }))
      << Status("fleet").dump();
  ::kill(a->pid(), SIGKILL);
  const auto killed = Clock::now();
  ASSERT_TRUE(StatusWithin("fleet", 2 + 8, [](const json& s) { return ServesFresh(s, "b", "m1"); }))
      << Status("fleet").dump();
  std::printf("[ ha] m1 reported to b %.2f s after a was killed (2 s lease)\n",
              std::chrono::duration<double>(Clock::now() - killed).count());
}

TEST_F(HaController, EtcdLostStopsTheLeaderWhichSaysSoAndLeadsAgainWhenEtcdReturns) {
  auto a = Start("a");
  ASSERT_TRUE(StatusWithin("a", 15, [](const json& s) { return Leads(s, "a"); })) << Status("a").dump();
  etcd_->Freeze();
  EXPECT_TRUE(StatusWithin("a", 6, [](const json& s) {
    return s["ha"].value("role", "") == "follower" && s.value("error", "").find("does not lead") != std::string::npos;
  })) << Status("a").dump();
  etcd_->Thaw();
  EXPECT_TRUE(StatusWithin("a", 10, [](const json& s) { return Leads(s, "a"); })) << Status("a").dump();
  // Its log said so too.
  ::kill(a->pid(), SIGTERM);
  ProcessResult r = a->Wait(20);
  EXPECT_NE(r.err.find("stopped acting: no lease renewal"), std::string::npos) << r.err;
}

TEST_F(HaController, EtcdUnreachableAtStartIsOneLineNamingTheEndpoints) {
  const std::string nowhere = "127.0.0.1:" + std::to_string(FreePort());
  ProcessResult r = testing::Run({BinDir() + "/bulwark", "controller", "--init", "--etcd", nowhere, "--dir",
                                  dirs_["a"], "--controller-id", "a"},
                                 {}, 20);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find(nowhere), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

// Ports for etcd members and controllers are known before anything listens
// on them. Bound to 0 and released, the kernel answers the same port again
// (132 repeats in 2,000 tries here), and two members of one test's etcd
// once shared a client port. One process never gets a port twice.
TEST(FreeTcpPort, NeverHandsOutThePortItHandedOutBefore) {
  std::set<int> seen;
  for (int i = 0; i < 2000; ++i) {
    const int port = plane::FreeTcpPort();
    ASSERT_GT(port, 0);
    ASSERT_TRUE(seen.insert(port).second) << "port " << port << " handed out twice, at try " << i;
  }
}

}  // namespace
}  // namespace bulwark::testing
