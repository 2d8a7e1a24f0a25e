// A machine its peers cannot reach costs that machine, never the job (issue
// 40), end to end with machines in network namespaces: an agent restarted
// by hand outside its namespace is refused at registration, and one whose
// namespace drops every connection made to it (a firewall) fails the
// controller's reach probe, so it is never given ranks. The job trains on
// through both and is never stopped: an elastic bulwark-train job, a
// whole-world one, and a PyTorch DDP job over Gloo
// (python/examples/ddp_train.py, on the pinned torch of the clone's .venv). Needs root (CI
// runs as root); skipped otherwise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "support/cluster_fixture.h"

// The Python job's script and interpreter, as python_checkpoint_cluster_test
// is given them (tests/CMakeLists.txt: BULWARK_TORCH_PYTHON, the clone's
// .venv unless configured otherwise).

namespace bulwark {
namespace {

// The job kinds: an elastic bulwark-train job narrows when no reachable
// standby is left; a whole-world one (bulwark-train or Python DDP) needs a
// second standby to take the second machine down's place.
enum class Kind { kElastic, kWholeWorld, kPythonDdp };

class Unreachable : public Cluster, public ::testing::WithParamInterface<Kind> {
 protected:
  void SetUp() override {
    Cluster::SetUp();
    if (::geteuid() != 0 || std::system("ip netns list >/dev/null 2>&1") != 0) {
      GTEST_SKIP() << "needs root and `ip netns` (CI runs as root)";
    }
  }
  void TearDown() override {
    hand_started_.reset();  // before `down` deletes its namespace
    Cluster::TearDown();
  }

  bool Elastic() const { return GetParam() == Kind::kElastic; }
  // The job's world: 3 machines for bulwark-train (the issue's), 2 for DDP.
  int World() const { return GetParam() == Kind::kPythonDdp ? 2 : 3; }
  // The standby that takes m01's slot, and (whole-world) the one that takes m02's.
  std::string Standby(int k) const { return "m0" + std::to_string(World() + k); }

  // The cluster: 3 machines and a standby, each in its namespace,
  // and the tiny elastic job on 3 replicas with in-memory checkpoints; or
  // the whole-world job with a second standby.
  void Start() {
    const std::string standbys = Elastic() ? "1" : "2";
    auto up = Bulwark({"up", "--machines", std::to_string(World()), "--standby", standbys, "--netns"});
    ASSERT_EQ(up.exit_code, 0) << up.err;
    std::ofstream job(root_ + "/job.yaml");
    if (GetParam() == Kind::kPythonDdp) {
      auto torch = testing::Run({BULWARK_TORCH_PYTHON, "-c", "import torch.distributed"}, {}, 120);
      ASSERT_EQ(torch.exit_code, 0) << BULWARK_TORCH_PYTHON << " cannot import torch: " << torch.err;
      job << "name: ddp\nworld_size: 2\ncommand: [" << BULWARK_TORCH_PYTHON << ", " << BULWARK_PYTHON_DIR
          << "/examples/ddp_train.py, --checkpoint, memory]\nenv: {PYTHONPATH: " << BULWARK_PYTHON_DIR
          << ", OMP_NUM_THREADS: '1', PYTHONUNBUFFERED: '1'}\n";
    } else {
      job << "name: tiny\nworld_size: 3\n" << (Elastic() ? "recovery: {mode: elastic}\n" : "")
          << "args: [--config, tiny, --data, " << *data_ << ", --steps, '1000000', --log-format, json, "
          << "--threads, '1', --dist-timeout, '10', --eval-every, '0', "
          << (Elastic() ? "--elastic-replicas, '3', " : "") << "--memory-ckpt, 'on']\nenv: {OMP_NUM_THREADS: '1'}\n";
    }
    job.close();
    auto sub = Bulwark({"submit", root_ + "/job.yaml"});
    ASSERT_EQ(sub.exit_code, 0) << sub.err;
    WaitFor("first steps", 120, [](const json& s) { return s["job"]["last_step"] >= 20; });
  }

  json Netns(const std::string& machine) {
    std::ifstream in(dir_ + "/netns.json");
    json plan = json::parse(in, nullptr, false);
    if (plan.is_object()) {
      for (const json& m : plan["machines"]) if (m["id"] == machine) return m;
    }
    ADD_FAILURE() << "no namespace for " << machine << " in " << dir_ << "/netns.json";
    return json::object();
  }

  // Runs a shell command and fails the test when it fails.
  static void Sh(const std::string& command) {
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }

  // The job was never stopped, and it trains past `step`.
  void TrainsOnPast(const std::string& what, int64_t step, double seconds) {
    WaitFor(what, seconds, [&](const json& s) {
      EXPECT_NE(s["job"]["state"], "stopped") << s.dump();
      return s["job"]["state"] == "running" && s["job"]["last_step"] > step;
    });
    for (const json& i : Query("incidents")) {
      EXPECT_NE(i.value("resolution", ""), "stopped") << i.dump();
    }
  }

  std::unique_ptr<testing::Process> hand_started_;
};

// The reproduction. m01 goes down and the standby m04 (DDP: m03) takes its
// slot. Its agent restarted by hand on the host's network is refused at
// registration with one line naming the fix. Started in its namespace but
// behind a firewall that drops every connection made to it, it registers
// (its own connection to the controller goes out) and is returned, but the
// controller cannot reach it where its ranks would listen: it fails its
// self-check, is evicted with that reason, and when m02 goes down the job
// trains on without it (elastic: on 2 replicas; whole-world: on the second
// standby) instead of taking it.
TEST_P(Unreachable, AMachineNobodyCanReachIsNeverGivenRanksAndTheJobTrainsOn) {
  Start();
  if (HasFatalFailure()) return;
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };

  // 1. machine-down m01: the standby takes its slot.
  int64_t step = Query("status")["job"]["last_step"];
  Inject("machine-down", "m01");
  json s = WaitFor(Standby(1) + " in m01's slot", 90, [&](const json& s) {
    return MachineState(s, "m01") == "evicted" && MachineState(s, Standby(1)) == "active" &&
           s["job"]["state"] == "running" && s["job"]["last_step"] > step + 10;
  });
  std::printf("[ timing ] machine-down m01 -> %s trains in its slot: %.1f s\n", Standby(1).c_str(), seconds());

  // 2. Its agent restarted by hand, outside its namespace: refused, in one
  // line that names the namespace to start it in.
  testing::ProcessResult refused =
      testing::Run({testing::BinDir() + "/bulwark", "agent", "--machine", "m01", "--dir", dir_}, {}, 60);
  EXPECT_NE(refused.exit_code, 0) << "the agent stops when refused";
  const json ns = Netns("m01");
  EXPECT_NE(refused.err.find("m01 advertises"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("ip netns exec " + ns.value("ns", std::string("?"))), std::string::npos) << refused.err;
  std::string last = refused.err;
  while (!last.empty() && last.back() == '\n') last.pop_back();
  const std::string line = last.substr(last.rfind('\n') == std::string::npos ? 0 : last.rfind('\n') + 1);
  EXPECT_NE(line.find("advertises"), std::string::npos) << "the reason is one line, the last: " << refused.err;
  std::printf("[ timing ] hand-started agent refused at %.1f s: %s\n", seconds(), line.c_str());
  step = Query("status")["job"]["last_step"];
  TrainsOnPast("training on after the refusal", step + 20, 60);
  EXPECT_EQ(MachineState(Query("status"), "m01"), "evicted");

  // 3. The registration check passed, the machine still unreachable: a
  // firewall in its namespace. Policy routing stands in for one (this
  // kernel has no tc actions or netfilter here): every TCP packet leaving
  // it is refused a route, but for those to the controller's port, so its
  // agent still reports while nothing that connects to it (the
  // controller's probe, a peer's rank) ever gets an answer.
  const std::string nsname = ns.value("ns", std::string());
  ASSERT_FALSE(nsname.empty());
  std::string controller;
  std::ifstream(dir_ + "/controller.addr") >> controller;
  const size_t colon = controller.rfind(':');
  ASSERT_NE(colon, std::string::npos) << controller;
  Sh("ip -n " + nsname + " rule add to " + controller.substr(0, colon) + " ipproto tcp dport " +
     controller.substr(colon + 1) + " lookup main pref 100");
  Sh("ip -n " + nsname + " rule add ipproto tcp prohibit pref 101");
  if (HasFatalFailure()) return;
  hand_started_ = std::make_unique<testing::Process>(std::vector<std::string>{
      "/usr/sbin/ip", "netns", "exec", nsname, testing::BinDir() + "/bulwark", "agent", "--machine", "m01", "--dir",
      dir_, "--nic", "eth0", "--address", ns.value("address", std::string())});
  // Registered (heard from) before it is returned.
  WaitFor("m01's agent heard again", 30, [&](const json& s) {
    for (const json& m : s["machines"]) {
      if (m["id"] == "m01" && m["last_heard_s_ago"].get<double>() < 1.0) return true;
    }
    return false;
  });
  auto ret = Bulwark({"machine", "return", "--machine", "m01"});
  ASSERT_EQ(ret.exit_code, 0) << ret.err;
  std::string reason;
  s = WaitFor("m01 not reached, evicted again", 60, [&](const json& s) {
    for (const json& m : s["machines"]) {
      if (m["id"] == "m01") reason = m.value("reason", "");
    }
    return MachineState(s, "m01") == "evicted" && reason.find("cannot reach m01") != std::string::npos;
  });
  std::printf("[ timing ] returned m01 behind a firewall, not activated at %.1f s: %s\n", seconds(), reason.c_str());
  EXPECT_NE(reason.find(ns.value("address", std::string("?"))), std::string::npos) << reason;

  // 4. machine-down m02: the elastic job, with no standby left that can be
  // reached, narrows to 2 replicas; the whole-world one takes the second
  // standby. Neither takes m01.
  step = s["job"]["last_step"];
  Inject("machine-down", "m02");
  s = WaitFor("training on without m02", 120, [&](const json& s) {
    EXPECT_NE(s["job"]["state"], "stopped") << s.dump();
    return MachineState(s, "m02") == "evicted" && s["job"]["state"] == "running" &&
           (Elastic() || MachineState(s, Standby(2)) == "active") && s["job"]["last_step"] > step + 20;
  });
  EXPECT_EQ(MachineState(s, "m01"), "evicted") << s.dump();
  for (const json& p : s["job"]["placement"]) EXPECT_NE(p, "m01") << s.dump();
  TrainsOnPast("training on", s["job"]["last_step"].get<int64_t>() + 20, 60);
  std::printf("[ timing ] m02 down, the job trains on without m01: %.1f s; incidents: %s\n", seconds(),
              Query("incidents").dump().c_str());
}

INSTANTIATE_TEST_SUITE_P(Jobs, Unreachable,
                         ::testing::Values(Kind::kElastic, Kind::kWholeWorld, Kind::kPythonDdp),
                         [](const ::testing::TestParamInfo<Kind>& k) {
                           return k.param == Kind::kElastic      ? std::string("Elastic")
                                  : k.param == Kind::kWholeWorld ? std::string("WholeWorld")
                                                                 : std::string("PythonDdp");
                         });

}  // namespace
}  // namespace bulwark
