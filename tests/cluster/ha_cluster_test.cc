// `bulwark up --ha`: three etcd members and two controllers. The leader is
// SIGKILLed under a training job: the other leads within the lease plus
// 2 s, the job trains on in its generation, a rank killed right after is
// handled by the new leader, and the run ends bitwise the fault-free run.
#include <signal.h>

#include <chrono>
#include <fstream>

#include "support/cluster_fixture.h"

namespace bulwark {
namespace {

class HaCluster : public Cluster {};

TEST_F(HaCluster, LeaderKilledTheNewOneLeadsHandlesAKillAndTheRunEndsBitwise) {
  auto up = Bulwark({"up", "--ha", "--machines", "2", "--standby", "1"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  const std::vector<std::string> args = {"--config", "tiny", "--data", *data_, "--steps", "300", "--log-format",
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

  pid_t c1 = 0;
  std::ifstream(dir_ + "/controllers/c1/controller.pid") >> c1;
  ASSERT_GT(c1, 0);
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
  WaitFor("the end", 300, [](const json& j) { return j["job"].value("done_step", json()) == 300; });
  EXPECT_EQ(ChecksumAt(300), ReferenceChecksum(args, 2));
}

}  // namespace
}  // namespace bulwark
