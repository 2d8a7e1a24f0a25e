// End to end on real Slurm: slurmctld and four slurmd on this host
// (support/slurm_cluster.sh), `bulwark up --backend slurm` inside an sbatch
// allocation of three nodes, the tiny trainer, and a machine down. Checks
// what Slurm itself says: the dead machine's node is drained with the
// incident as its Reason and has left the allocation, the standby shortfall
// brought in the fourth node as a job of its own, and `machine return`
// resumed the node and started its agent again.
//
// Skips only when Slurm is not installed or the test is not root
// (support/slurm_fixture.h).
#include <gtest/gtest.h>

#include <fstream>

#include "support/slurm_fixture.h"

namespace bulwark {
namespace {

TEST_F(SlurmCluster, MachineDownDrainsTheNodeWithTheIncidentAndReturnResumesIt) {
  // Three nodes: two for the job and a standby; --grow 1 for the fourth.
  ASSERT_TRUE(UpInAllocation(3, "--machines 2 --standby 1 --grow 1 --failure-rate 0.06"));

  // A tiny job with every-step in-memory checkpoints, ZeRO-1 sharded: each
  // rank's own shard is what its backup peer holds. (With replicated state a
  // rank writes its neighbour's backup from its own memory; in one of the
  // first runs of this test that copy restored as "Invalid mt19937 state" and
  // the job stopped. That path is the in-memory checkpoints' own tests'.)
  std::ofstream(root_ + "/job.yaml")
      << "name: tiny\nworld_size: 2\ncheckpoint: {persist_every: 10}\n"
      << "args: [--config, tiny, --data, " << *data_ << ", --steps, '1000000', --log-format, json, "
      << "--threads, '1', --dist-timeout, '10', --memory-ckpt, 'on', --shard-optimizer]\n"
      << "env: {OMP_NUM_THREADS: '1'}\n";
  auto sub = Bulwark({"submit", root_ + "/job.yaml"});
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  json s = WaitFor("first steps", 90, [](const json& s) { return s["job"]["last_step"] >= 30; });
  ASSERT_EQ(s["job"]["placement"].size(), 2u);
  // The batch script's node stays in the allocation whatever happens; the
  // other placed node is the one to lose.
  std::ifstream rec(dir_ + "/backend.json");
  const json record = json::parse(rec, nullptr, false);
  ASSERT_TRUE(record.is_object());
  std::string victim;
  for (const json& m : s["job"]["placement"]) {
    if (m != record["batch_host"]) victim = m;
  }
  ASSERT_FALSE(victim.empty()) << s.dump();

  // The machine dies: its agent and ranks at once.
  const int64_t gen = s["job"]["generation"];
  Inject("machine-down", victim);
  s = WaitFor("a standby replaces " + victim, 90, [&](const json& x) {
    return x["job"]["generation"] > gen && x["job"]["state"] == "running" && x["job"]["last_step"] > 0 &&
           !x["job"]["placement"].dump().empty() && x["job"]["placement"].dump().find(victim) == std::string::npos;
  });
  const int64_t resumed_at = s["job"]["last_step"];
  s = WaitFor("steps after the replacement", 90, [&](const json& x) { return x["job"]["last_step"] > resumed_at + 20; });
  EXPECT_EQ(MachineState(s, victim), "evicted");
  Report("machine-down");
  json incidents = Query("incidents");
  ASSERT_TRUE(incidents.is_array() && !incidents.empty()) << incidents.dump();
  const json inc = incidents.back();
  // Every step was checkpointed in memory. The lost machine's shards come
  // from its backup peer, sent over the network (ZeRO-1): the controller may
  // have heard of step k while the copy of k is being taken and that of
  // k - 1 is still on its way to the peer (client/shard_client.h: two
  // slots), so the peer's newest whole copy can be k - 2. Under the suite's
  // load that happened once in three runs.
  EXPECT_LE(inc.value("lost_steps", int64_t{99}), 2) << inc.dump();
  const std::string incident = "incident " + std::to_string(inc["id"].get<int64_t>());

  // Slurm's word: drained (not draining: the node left the allocation),
  // with the incident as its reason.
  std::string line;
  EXPECT_TRUE(Until(victim + " drained in Slurm", 60, [&] {
    line = NodeLine(victim);
    return line.find(" State=IDLE+DRAIN") != std::string::npos &&
           line.find(" Reason=bulwark job tiny " + incident + ":") != std::string::npos;
  })) << line;
  std::printf("[ slurm ] %s\n", line.substr(line.find(" State=")).substr(0, 200).c_str());
  auto info = Slurm({"sinfo", "-h", "-N", "-n", victim, "-o", "%T|%E"});
  EXPECT_EQ(info.out.substr(0, info.out.find('|')), "drained") << info.out;

  // The standby shortfall asked Slurm for a node: the fourth one joins.
  EXPECT_TRUE(Until("a fourth node on standby", 90, [&] {
    json x = Query("status");
    int standby = 0;
    if (x.is_object()) {
      for (const json& m : x["machines"]) standby += m["state"] == "standby";
    }
    return standby == 1;
  }));

  // The operator returns the machine: Slurm resumes the node and a new
  // agent there passes its self-check.
  auto ret = Bulwark({"machine", "return", "--machine", victim});
  ASSERT_EQ(ret.exit_code, 0) << ret.err;
  EXPECT_TRUE(Until(victim + " resumed in Slurm", 60, [&] {
    line = NodeLine(victim);
    return line.find(" State=") != std::string::npos && line.find("DRAIN") == std::string::npos;
  })) << line;
  WaitFor(victim + " back on standby", 90, [&](const json& x) { return MachineState(x, victim) == "standby"; });
  const int64_t last = Query("status")["job"]["last_step"];
  WaitFor("training on", 60, [&](const json& x) { return x["job"]["last_step"] > last + 10; });

  // `down` leaves nothing in Slurm: the agents' steps and jobs are
  // cancelled, and the allocation's script ends with the controller. No
  // node is drained on the way (the controller goes first).
  auto down = Bulwark({"down"});
  ASSERT_EQ(down.exit_code, 0) << down.err;
  EXPECT_TRUE(Until("no Slurm jobs left", 60, [&] { return Slurm({"squeue", "-h"}).out.empty(); }));
  auto drained = Slurm({"sinfo", "-h", "-N", "-t", "drain", "-o", "%N %E"});
  EXPECT_EQ(drained.out, "") << "drained by down";
}

}  // namespace
}  // namespace bulwark
