// Two `bulwark controller --etcd` processes, each in a network namespace of
// its own on a bridge where etcd and an agent sit on the host's side. The
// leader's port is taken off the bridge, as a switch isolating it: the other
// leads within the lease plus 2 s and the agent reports to it; the cut-off
// one stops acting and says why in its status (asked inside its namespace).
// Healed, it comes back as a follower of the new leader and takes nothing
// back. Needs root and iproute2; skipped otherwise.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "support/etcd_server.h"
#include "support/process.h"

namespace bulwark::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

bool Sh(const std::string& cmd) { return std::system(cmd.c_str()) == 0; }

class HaPartition : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0 || !Sh("ip netns list >/dev/null 2>&1")) GTEST_SKIP() << "needs root and ip netns";
    // A subnet and names of this process's own: tests may run in parallel.
    const int k = 20 + ::getpid() % 200;
    tag_ = "bwha" + std::to_string(k);
    const std::string net = "10.219." + std::to_string(k) + ".";
    gateway_ = net + "1";
    ASSERT_TRUE(Sh("ip link add " + tag_ + "br type bridge && ip addr add " + gateway_ + "/24 dev " + tag_ +
                   "br && ip link set " + tag_ + "br up"));
    int host = 2;
    for (const char* id : {"a", "b"}) {
      const std::string ns = Ns(id), veth = Veth(id);
      addr_[id] = net + std::to_string(host++);
      // As cluster/local/netns.cc does: the peer made here, moved, renamed.
      ASSERT_TRUE(Sh("ip netns add " + ns + " && ip link add " + veth + " type veth peer name " + veth +
                     "n && ip link set " + veth + "n netns " + ns + " && ip -n " + ns + " link set " + veth +
                     "n name eth0 && ip link set " + veth + " master " + tag_ + "br up && ip -n " + ns +
                     " addr add " + addr_[id] + "/24 dev eth0 && ip -n " + ns + " link set eth0 up && ip -n " + ns +
                     " link set lo up"));
    }
    std::string why;
    etcd_ = EtcdServer::Start(&why, 1, gateway_);
    ASSERT_NE(etcd_, nullptr) << why;
    const std::string token = "0123456789abcdef0123456789abcdef";
    const std::string root = MakeTempDir();
    for (const char* id : {"a", "b", "fleet"}) {
      const std::string dir = root + "/" + id;
      ::mkdir(dir.c_str(), 0755);
      std::ofstream(dir + "/token") << token << "\n";
      ::chmod((dir + "/token").c_str(), 0600);
      dirs_[id] = dir;
    }
    for (const char* id : {"a", "b"}) {
      address_[id] = addr_[id] + ":" + std::to_string(FreePort());
      std::ofstream(dirs_[id] + "/controller.addr") << address_[id] << "\n";
    }
    std::ofstream(dirs_["fleet"] + "/controllers.addr") << address_["a"] << "\n" << address_["b"] << "\n";
  }
  void TearDown() override {
    agent_.reset();
    controllers_.clear();
    etcd_.reset();
    if (tag_.empty()) return;
    for (const char* id : {"a", "b"}) Sh("ip netns del " + Ns(id) + " 2>/dev/null");
    Sh("ip link del " + tag_ + "br 2>/dev/null");
  }
  std::string Ns(const std::string& id) const { return tag_ + "-" + id; }
  std::string Veth(const std::string& id) const { return tag_ + id; }

  void StartController(const std::string& id) {
    controllers_[id] = std::make_unique<Process>(std::vector<std::string>{
        "/usr/sbin/ip", "netns", "exec", Ns(id), BinDir() + "/bulwark", "controller", "--init", "--etcd",
        etcd_->endpoint(), "--etcd-lease", "2", "--dir", dirs_[id], "--controller-id", id});
  }
  // `id`'s status asked inside its own namespace (reachable while cut off),
  // or the fleet's through its list of controllers, from the host.
  json Status(const std::string& id) {
    std::vector<std::string> argv = {BinDir() + "/bulwark", "status", "--json", "--dir", dirs_[id]};
    if (id != "fleet") argv.insert(argv.begin(), {"/usr/sbin/ip", "netns", "exec", Ns(id)});
    ProcessResult r = testing::Run(argv, {}, 10);
    return r.exit_code == 0 ? json::parse(r.out, nullptr, false) : json();
  }
  bool StatusWithin(const std::string& id, double seconds, const std::function<bool(const json&)>& cond) {
    const auto until = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < until) {
      if (json s = Status(id); s.is_object() && cond(s)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  static bool Leads(const json& s, const std::string& id) {
    return s.value("leader", json()) == id && s["ha"].is_object() && s["ha"].value("role", "") == "leader";
  }
  static bool ServesFresh(const json& s, const std::string& leader) {
    if (!Leads(s, leader)) return false;
    for (const json& m : s["machines"]) {
      if (m.value("id", "") == "m1" && m.value("last_heard_s_ago", 99.0) < 1.0) return true;
    }
    return false;
  }

  std::string tag_, gateway_;
  std::map<std::string, std::string> addr_, address_, dirs_;
  std::unique_ptr<EtcdServer> etcd_;
  std::map<std::string, std::unique_ptr<Process>> controllers_;
  std::unique_ptr<Process> agent_;
};

TEST_F(HaPartition, TheCutOffLeaderStopsActingAnotherLeadsAndHealedItFollows) {
  StartController("a");
  ASSERT_TRUE(StatusWithin("a", 15, [](const json& s) { return Leads(s, "a"); })) << Status("a").dump();
  StartController("b");
  ASSERT_TRUE(StatusWithin("b", 15, [](const json& s) { return s.value("leader", json()) == "a"; }))
      << Status("b").dump();
  agent_ = std::make_unique<Process>(
      std::vector<std::string>{BinDir() + "/bulwark", "agent", "--machine", "m1", "--dir", dirs_["fleet"]});
  ASSERT_TRUE(StatusWithin("fleet", 20, [](const json& s) { return ServesFresh(s, "a"); })) << Status("fleet").dump();

  // a's port off the bridge: it reaches neither etcd nor the agent, and
  // does not know it (its link stays up).
  ASSERT_TRUE(Sh("ip link set " + Veth("a") + " nomaster"));
  const auto cut = Clock::now();
  auto since = [&] { return std::chrono::duration<double>(Clock::now() - cut).count(); };
  ASSERT_TRUE(StatusWithin("b", 2 + 2, [](const json& s) { return Leads(s, "b"); })) << Status("b").dump();
  std::printf("[ partition] b led %.2f s after a was cut off (2 s lease)\n", since());
  ASSERT_TRUE(StatusWithin("fleet", 10, [](const json& s) { return ServesFresh(s, "b"); })) << Status("fleet").dump();
  std::printf("[ partition] m1 reported to b %.2f s after the cut\n", since());
  // a stopped acting at its renew deadline (2/3 of the lease); it answers
  // status again once its last journal write has given up on etcd.
  EXPECT_TRUE(StatusWithin("a", 10, [](const json& s) {
    return s["ha"].is_object() && s["ha"].value("role", "") == "follower" &&
           s.value("error", "").find("does not lead") != std::string::npos;
  })) << "a says it does not lead: " << Status("a").dump();
  std::printf("[ partition] a says so %.2f s after the cut: %s\n", since(), Status("a").value("error", "").c_str());

  // Healed: a finds b leading, follows it and takes nothing back.
  ASSERT_TRUE(Sh("ip link set " + Veth("a") + " master " + tag_ + "br"));
  const std::string b_address = address_["b"];
  EXPECT_TRUE(StatusWithin("a", 10, [&](const json& s) {
    return s["ha"].is_object() && s["ha"].value("role", "") == "follower" && s.value("leader", json()) == "b" &&
           s.value("leader_address", json()) == b_address;
  })) << Status("a").dump();
  // For a full lease after healing, b still leads and a does not.
  for (const auto until = Clock::now() + std::chrono::seconds(2); Clock::now() < until;) {
    ASSERT_TRUE(Leads(Status("b"), "b")) << Status("b").dump();
    ASSERT_FALSE(Leads(Status("a"), "a")) << Status("a").dump();
  }
}

}  // namespace
}  // namespace bulwark::testing
