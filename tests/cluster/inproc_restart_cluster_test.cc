// Restarts that keep processes, end to end on a real local cluster
// (docs/recovery.md): when a rank dies, its peer on another machine keeps
// its process and rejoins the next generation in place, and the dead rank's
// machine hands its rank to the spare it pre-spawned; a standby that takes a
// dead machine's slot does the same with the spare it kept warm. The job ends
// bitwise where a fault-free run ends. Every wait polls status or a log; no
// fixed sleeps.
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "support/cluster_fixture.h"
#include "support/process.h"

namespace bulwark {
namespace {

class InProcessRestart : public Cluster {
 protected:
  // Long enough that the second fault comes while the job trains.
  // Enough for both faults, over by step 40 of 600 at load 6-10 (printed):
  // the test's time is mostly the steps of this run and of the fault-free
  // reference, which runs as many.
  static constexpr int kSteps = 200;
  std::vector<std::string> TrainerArgs() const {
    return {"--config", "tiny", "--data", *data_, "--steps", std::to_string(kSteps), "--log-format", "json",
            "--threads", "1", "--dist-timeout", "10", "--eval-every", "0", "--step-checksum"};
  }
};

TEST_F(InProcessRestart, SurvivorsKeepTheirProcessSparesTakeTheDeadRanksAndTheRunEndsBitwise) {
  auto up = Bulwark({"up", "--machines", "2", "--standby", "1"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  {
    std::ofstream job(root_ + "/job.yaml");
    job << "name: short\nworld_size: 2\ncheckpoint: {persist_every: 10}\nargs: [";
    for (const std::string& a : TrainerArgs()) job << "'" << a << "', ";
    job << "--memory-ckpt, 'on']\nenv: {OMP_NUM_THREADS: '1'}\n";
  }
  auto sub = Bulwark({"submit", root_ + "/job.yaml"});
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  json s = WaitFor("first steps", 60, [](const json& s) { return s["job"]["last_step"] >= 20; });
  ASSERT_EQ(s["job"]["placement"], json({"m01", "m02"}));
  // Each machine pre-spawns a spare once the job trains.
  const json spare = WaitForEvent("m01's spare", RankLog("m01", "spare.log"), "spare_ready", 120);
  ASSERT_TRUE(spare.is_object());
  const int64_t spare_pid = spare["pid"];
  const int64_t gen = s["job"]["generation"];
  // The processes of this generation, as each said itself.
  auto pid_of = [&](const std::string& log, int64_t generation) {
    for (const json& a : Events(log, "adopt")) {
      if (a["generation"] == generation) return a["pid"].get<int64_t>();
    }
    return int64_t{-1};
  };
  const int64_t survivor_pid = pid_of(RankLog("m02", "rank-1.log"), gen);
  const int64_t killed_pid = pid_of(RankLog("m01", "rank-0.log"), gen);
  ASSERT_GT(survivor_pid, 0) << ReadAll(RankLog("m02", "rank-1.log"));
  ASSERT_GT(killed_pid, 0) << ReadAll(RankLog("m01", "rank-0.log"));

  // Rank 0 dies on m01.
  const size_t incidents = Query("incidents").size();
  Inject("kill", "m01");
  s = WaitFor("kill recovered", 90, [&](const json& x) {
    return x["job"]["generation"] > gen && x["job"]["state"] == "running" && x["job"]["incidents"] > incidents &&
           x["job"]["last_step"] > 0;
  });
  Report("kill");
  ASSERT_EQ(s["job"]["placement"], json({"m01", "m02"})) << "a kill restarts in place";
  const int64_t next = s["job"]["generation"];

  // m02's rank 1 rejoined in its own process: the agent's banner and the
  // trainer's own line name the pid it had before.
  const auto after = Banners(RankLog("m02", "rank-1.log"));
  ASSERT_EQ(after.count(next), 1u) << ReadAll(RankLog("m02", "rank-1.log"));
  EXPECT_EQ(after.at(next).first, "rejoin");
  EXPECT_EQ(after.at(next).second, survivor_pid);
  std::vector<json> adopted = Events(RankLog("m02", "rank-1.log"), "adopt");
  ASSERT_FALSE(adopted.empty());
  EXPECT_EQ(adopted.back()["path"], "rejoin");
  EXPECT_EQ(adopted.back()["rank"], 1);
  EXPECT_EQ(adopted.back()["pid"], survivor_pid) << "the survivor was not the same process";
  EXPECT_EQ(adopted.back()["generation"], next);

  // m01's rank 0 is the spare, not a new process, and knows it is rank 0.
  const auto replaced = Banners(RankLog("m01", "rank-0.log"));
  ASSERT_EQ(replaced.count(next), 1u) << ReadAll(RankLog("m01", "rank-0.log"));
  EXPECT_EQ(replaced.at(next).first, "prespawned");
  EXPECT_EQ(replaced.at(next).second, spare_pid);
  EXPECT_NE(spare_pid, killed_pid);
  adopted = Events(RankLog("m01", "rank-0.log"), "adopt");
  ASSERT_FALSE(adopted.empty());
  EXPECT_EQ(adopted.back()["path"], "prespawned");
  EXPECT_EQ(adopted.back()["rank"], 0);
  EXPECT_EQ(adopted.back()["pid"], spare_pid);
  const json start = Events(RankLog("m01", "rank-0.log"), "start").back();
  EXPECT_EQ(start["path"], "prespawned");
  EXPECT_EQ(start["pid"], spare_pid);
  const std::vector<json> restores = Events(RankLog("m01", "rank-0.log"), "restore");
  ASSERT_FALSE(restores.empty());
  // From this machine's memory, or the peer's copy when the peer finished
  // a step the killed rank did not (replicated state: that copy is newer).
  const std::string source = restores.back().value("source", "");
  EXPECT_TRUE(source == "memory" || source == "peer") << restores.back().dump();

  // m02 dies whole: the standby m03 takes slot 1 with the spare it kept
  // warm, and rank 0 rejoins in the process that was the spare.
  const json warm = WaitForEvent("m03's warm spare", RankLog("m03", "spare.log"), "spare_ready", 120);
  ASSERT_TRUE(warm.is_object());
  const size_t incidents2 = Query("incidents").size();
  Inject("machine-down", "m02");
  s = WaitFor("machine-down recovered", 90, [&](const json& x) {
    return x["job"]["generation"] > next && x["job"]["state"] == "running" && x["job"]["incidents"] > incidents2 &&
           x["job"]["last_step"] > 0;
  });
  Report("machine-down");
  std::printf("[ timing ] machine-down recovered at step %d of %d\n", s["job"]["last_step"].get<int>(), kSteps);
  ASSERT_EQ(s["job"]["placement"], json({"m01", "m03"}));
  const int64_t third = s["job"]["generation"];
  const auto swapped = Banners(RankLog("m03", "rank-1.log"));
  ASSERT_EQ(swapped.count(third), 1u) << ReadAll(RankLog("m03", "rank-1.log"));
  EXPECT_EQ(swapped.at(third).first, "prespawned");
  EXPECT_EQ(swapped.at(third).second, warm["pid"].get<int64_t>());
  EXPECT_EQ(Banners(RankLog("m01", "rank-0.log")).at(third), std::make_pair(std::string("rejoin"), spare_pid));

  // The job runs to its end and ends bitwise where a fault-free run does.
  s = WaitFor("job completed", 180, [](const json& x) { return x["job"]["state"] == "completed"; });
  std::vector<json> done = Events(RankLog("m01", "rank-0.log"), "done");
  ASSERT_FALSE(done.empty());
  EXPECT_EQ(done.back()["step"], kSteps);
  const std::string reference = ReferenceChecksum(TrainerArgs(), 2);
  ASSERT_FALSE(reference.empty());
  EXPECT_EQ(done.back()["param_checksum"], reference) << "the run restarted in place diverged from the fault-free one";
}

}  // namespace
}  // namespace bulwark
