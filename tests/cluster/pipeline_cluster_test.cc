// A pipeline-parallel job (DP 2 x PP 2) on the local cluster: the controller
// knows its groups, backs each rank up outside its PP and DP groups, and
// recovers a killed rank and a dead machine from every-step in-memory
// checkpoints; the job then ends bitwise where a fault-free run ends.
#include <signal.h>

#include <map>
#include <set>

#include "support/cluster_fixture.h"

namespace bulwark {
namespace {

// Long enough that a fast machine is still training at the second fault.
// Enough for each test's faults, over by step 73 and 26 at load 40-47
// (printed): the rest of a test's time is the run's steps and, in the
// first, a fault-free reference of as many.
constexpr int kSteps = 200;

class Pipeline : public Cluster {
 protected:
  std::vector<std::string> TrainerArgs() const {
    return {"--config", "tiny", "--data", *data_, "--steps", std::to_string(kSteps), "--log-format", "json",
            "--threads", "1", "--dist-timeout", "10", "--pp", "2", "--micro-batches", "2", "--eval-every", "0"};
  }

  // The newest event of `kind` in rank `rank`'s log on `machine`.
  json LastEvent(const std::string& machine, int rank, const std::string& kind) {
    std::ifstream in(dir_ + "/machines/" + machine + "/ranks/rank-" + std::to_string(rank) + ".log");
    std::string line;
    json last;
    while (std::getline(in, line)) {
      json j = json::parse(line, nullptr, false);
      if (j.is_object() && j.value("event", "") == kind) last = j;
    }
    return last;
  }

  json Survive(const std::string& fault, const std::string& machine) {
    json s = Query("status");
    const int64_t gen = s["job"]["generation"];
    const size_t incidents = Query("incidents").size();
    Inject(fault, machine);
    WaitFor(fault + " recovered", 60, [&](const json& x) {
      return x["job"]["generation"] > gen && x["job"]["state"] == "running" && x["job"]["incidents"] > incidents;
    });
    Report(fault);
    json inc = Query("incidents");
    return inc.empty() ? json() : inc.back();
  }
};

TEST_F(Pipeline, GroupsBackupsAndInMemoryRecoveryEndBitwiseLikeAFaultFreeRun) {
  auto up = Bulwark({"up", "--machines", "4", "--standby", "2"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  {
    std::ofstream job(root_ + "/job.yaml");
    job << "name: pipe\nworld_size: 4\nparallel: {pp: 2}\ncheckpoint: {persist_every: 10}\nargs: [";
    for (const std::string& a : TrainerArgs()) job << "'" << a << "', ";
    job << "--memory-ckpt, 'on']\nenv: {OMP_NUM_THREADS: '1'}\n";
  }
  auto sub = Bulwark({"submit", root_ + "/job.yaml"});
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  json s = WaitFor("first steps", 60, [](const json& s) { return s["job"]["last_step"] >= 20; });
  ASSERT_EQ(s["job"]["placement"], json({"m01", "m02", "m03", "m04"}));

  // rank = dp + 2 * pp: each pipeline spans two machines, each stage's DP
  // group two others.
  const json& topo = s["job"]["topology"];
  EXPECT_EQ(topo["pp"], 2);
  EXPECT_EQ(topo["dp"], 2);
  std::set<std::string> groups;
  for (const json& g : topo["groups"]) groups.insert(g["kind"].get<std::string>() + g["machines"].dump());
  EXPECT_EQ(groups, (std::set<std::string>{"pp[\"m01\",\"m03\"]", "pp[\"m02\",\"m04\"]", "dp[\"m01\",\"m02\"]",
                                           "dp[\"m03\",\"m04\"]"}))
      << topo.dump();
  // Each machine's backups lie outside both of its groups: the diagonal.
  std::map<std::string, std::string> peer;
  for (const json& p : s["job"]["checkpoints"]["backup_peers"]) peer[p["machine"]] = p["backup_machine"];
  EXPECT_EQ(peer, (std::map<std::string, std::string>{{"m01", "m04"}, {"m02", "m03"}, {"m03", "m02"}, {"m04", "m01"}}));

  // A killed rank of the last stage: reattempt in place, every stage
  // restores the same step from memory.
  json inc = Survive("kill", "m03");
  EXPECT_EQ(inc.value("resolution", ""), "reattempt") << inc.dump();
  EXPECT_LE(inc.value("lost_steps", int64_t{99}), 1) << inc.dump();
  json r = LastEvent("m01", 0, "restore");
  EXPECT_EQ(r.value("source", ""), "memory") << r.dump();
  EXPECT_EQ(r["sources"].size(), 4u) << r.dump();

  // A dead first-stage machine: the standby takes its slot and its rank
  // restores from the backup on m03, outside its pipeline and its stage.
  const int64_t before = Query("status")["job"]["last_step"];
  WaitFor("steps after the restart", 30, [&](const json& x) { return x["job"]["last_step"] > before + 15; });
  inc = Survive("machine-down", "m02");
  EXPECT_EQ(inc.value("resolution", ""), "evicted_and_replaced") << inc.dump();
  // The backup on m03 was pushed, and pushes trail by one image: a rank that
  // died before sealing step s left s-2 there (shard_client.h).
  EXPECT_LE(inc.value("lost_steps", int64_t{99}), 2) << inc.dump();
  s = Query("status");
  std::printf("[ timing ] machine-down recovered at step %d of %d\n", s["job"]["last_step"].get<int>(), kSteps);
  EXPECT_EQ(s["job"]["placement"], json({"m01", "m05", "m03", "m04"}));
  r = LastEvent("m01", 0, "restore");
  EXPECT_EQ(r.value("source", ""), "peer") << r.dump();
  EXPECT_EQ(r["sources"][1], "peer") << "rank 1 (on the standby) restores from m03's backup: " << r.dump();

  // The job completes where a run without faults completes.
  WaitFor("job completed", 120, [](const json& x) { return x["job"]["state"] == "completed"; });
  json done = LastEvent("m01", 0, "done");
  ASSERT_TRUE(done.is_object());
  EXPECT_EQ(done["step"], kSteps);
  // The fault-free reference: four ranks run directly, no agent, no
  // in-memory checkpoints.
  const std::string reference = ReferenceChecksum(TrainerArgs(), 4, {{"LOCAL_RANK", "0"}, {"OMP_NUM_THREADS", "1"}});
  ASSERT_FALSE(reference.empty());
  EXPECT_EQ(done["param_checksum"], reference) << "the recovered run diverged from the fault-free one";
}

// Dual-phase replay keeps the job's pipeline layout (ByteRobust's
// Algorithm 1): with alignment left out of the ladder's tests, m03 (stage
// 1 of replica 0) corrupts its gradients silently; the horizontal groups
// replay one stage's share of the layers each, data parallel ({m01, m02}
// stage 0, {m03, m04} stage 1), the vertical ones the job's own two-stage
// pipeline with DP shrunk to 1 ({m01, m03}, {m02, m04}). h1 and v0
// diverge and m03 is the only machine in both.
TEST_F(Pipeline, DualPhaseReplayKeepsThePipelineLayoutAndFindsTheSdcMachine) {
  auto up = Bulwark({"up", "--machines", "4", "--standby", "2", "--ladder-tests", "compute,device"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  {
    std::ofstream job(root_ + "/job.yaml");
    job << "name: pipe\nworld_size: 4\nparallel: {pp: 2}\nargs: [";
    for (const std::string& a : TrainerArgs()) job << "'" << a << "', ";
    job << "--memory-ckpt, 'on']\nenv: {OMP_NUM_THREADS: '1'}\n";
  }
  auto sub = Bulwark({"submit", root_ + "/job.yaml"});
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  json s = WaitFor("first steps", 60, [](const json& s) { return s["job"]["last_step"] >= 20; });
  const int64_t gen = s["job"]["generation"];
  Inject("sdc", "m03");
  s = WaitFor("eviction of m03", 150, [&](const json& s) {
    return MachineState(s, "m03") == "evicted" && s["job"]["generation"] > gen && s["job"]["state"] == "running";
  });
  std::printf("[ timing ] m03 evicted at step %d of %d\n", s["job"]["last_step"].get<int>(), kSteps);
  json inc = Query("incidents").back();
  EXPECT_EQ(inc["evicted"], json({"m03"})) << inc.dump();
  ASSERT_TRUE(inc.contains("ladder")) << inc.dump();
  const std::vector<std::string> rungs = LadderRungs(inc);
  ASSERT_FALSE(rungs.empty()) << inc.dump();
  EXPECT_EQ(rungs.back(), "replay") << inc.dump();
  EXPECT_EQ(inc["ladder"].back()["outcome"], "culprit m03 (h1 x v0)") << inc.dump();
  // Each machine ran its groups in the job's layout: the agents' logs say how.
  std::ifstream f(dir_ + "/machines/m01/agent.log");
  const std::string log((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(log.find("replay/h0 ok"), std::string::npos) << log;
  EXPECT_NE(log.find("(stage 0's layers, data parallel; hash "), std::string::npos) << log;
  EXPECT_NE(log.find("(the job's pipeline (pp 2); diverged (non-finite); hash "), std::string::npos) << log;
}

}  // namespace
}  // namespace bulwark
