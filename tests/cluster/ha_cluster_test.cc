// `bulwark up --ha`: three etcd members and two controllers under a
// training job. One etcd member killed changes nothing. The leader
// SIGKILLed: the other leads within the lease plus 2 s and the job trains on
// in its generation; a rank killed right after is handled by the new leader.
// Both controllers SIGKILLed and restarted: they replay the journal from
// etcd with nothing lost. The run ends bitwise the fault-free run.
#include <signal.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "support/cluster_fixture.h"

namespace bulwark {
namespace {

class HaCluster : public Cluster {
 protected:
  pid_t Pid(const std::string& file) {
    pid_t pid = 0;
    std::ifstream(dir_ + "/" + file) >> pid;
    return pid;
  }
  // The argv a process was started with, to start it again the same way.
  static std::vector<std::string> Argv(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
    std::vector<std::string> out;
    std::string arg;
    while (std::getline(in, arg, '\0')) out.push_back(arg);
    return out;
  }
};

TEST_F(HaCluster, MemberLossLeaderLossAndBothControllersLostTheRunEndsBitwise) {
  auto up = Bulwark({"up", "--ha", "--machines", "2", "--standby", "1"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  const std::vector<std::string> args = {"--config", "tiny", "--data", *data_, "--steps", "600", "--log-format",
                                         "json", "--threads", "1", "--dist-timeout", "10", "--eval-every", "0"};
  {
    std::ofstream job(root_ + "/job.yaml");
    job << "name: ha\nworld_size: 2\ncheckpoint: {persist_every: 10}\nargs: [";
    for (const std::string& a : args) job << "'" << a << "', ";
    job << "--memory-ckpt, 'on', --step-checksum]\nenv: {OMP_NUM_THREADS: '1'}\n";
  }
  auto sub = Bulwark({"submit", root_ + "/job.yaml"});
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  json s = WaitFor("first steps under c1", 60, [](const json& j) { return j["job"]["last_step"] >= 30; });
  ASSERT_EQ(s.value("leader", json()), "c1") << s.dump();

  const pid_t c1 = Pid("controllers/c1/controller.pid"), c2 = Pid("controllers/c2/controller.pid");
  ASSERT_GT(c1, 0);
  ASSERT_GT(c2, 0);
  const std::vector<std::string> argv1 = Argv(c1), argv2 = Argv(c2);

  // One etcd member of three lost: nothing changes.
  ASSERT_GT(Pid("etcd/2/etcd.pid"), 0);
  ::kill(Pid("etcd/2/etcd.pid"), SIGKILL);
  const int64_t step_at_member_loss = s["job"]["last_step"];
  s = WaitFor("steps after an etcd member's loss", 60,
              [&](const json& j) { return j["job"]["last_step"] > step_at_member_loss + 20; });
  EXPECT_EQ(s.value("leader", json()), "c1") << s.dump();
  EXPECT_EQ(s["job"]["generation"], 1) << s.dump();
  EXPECT_EQ(s["job"]["incidents"], 0) << s.dump();

  ::kill(c1, SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  s = WaitFor("c2 leading", 5 + 2, [](const json& j) { return j.value("leader", json()) == "c2"; });
  std::printf("[ timing ] c2 led %.2f s after c1's SIGKILL (5 s lease)\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count());
  const int64_t step_at_failover = s["job"]["last_step"];
  s = WaitFor("steps under c2", 60, [&](const json& j) { return j["job"]["last_step"] > step_at_failover + 10; });
  EXPECT_EQ(s["job"]["generation"], 1) << "the job trained through the failover: " << s.dump();
  EXPECT_EQ(s["job"]["incidents"], 0) << s.dump();

  Inject("kill", "m01");
  WaitFor("c2's reattempt", 60, [](const json& j) {
    return j["job"]["generation"] == 2 && j["job"]["state"] == "running" && j["job"]["incidents"] == 1;
  });
  Report("kill");

  // Both controllers gone, then back: the journal in etcd is all they have.
  ::kill(c2, SIGKILL);
  testing::Process again1(argv1), again2(argv2);
  s = WaitFor("a controller leading again", 30, [](const json& j) { return !j.value("leader", json()).is_null(); });
  EXPECT_EQ(s["job"]["generation"], 2) << "nothing lost: " << s.dump();
  EXPECT_EQ(s["job"]["incidents"], 1) << s.dump();
  EXPECT_EQ(Query("incidents").size(), 1u) << Query("incidents").dump();

  WaitFor("the end", 300, [](const json& j) { return j["job"].value("done_step", json()) == 600; });
  EXPECT_EQ(ChecksumAt(600), ReferenceChecksum(args, 2));
}

}  // namespace
}  // namespace bulwark
