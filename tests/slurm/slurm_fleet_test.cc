// Two jobs on one Slurm allocation (issue 36, item 4), end to end on real
// Slurm (support/slurm_fixture.h): `bulwark up --backend slurm` on four
// nodes, jobs a (one machine) and b (two) submitted with --job, and b's
// non-batch machine down. Checks that the allocation's one standby goes to
// b, that a's rank is not touched (same generation, same machine, training
// on), and that Slurm drains the lost node with b's incident as its reason
// and nothing else.
#include <gtest/gtest.h>

#include <fstream>

#include "support/slurm_fixture.h"

namespace bulwark {
namespace {

class SlurmFleet : public SlurmCluster {
 protected:
  void WriteJob(const std::string& name, int world_size) {
    std::ofstream(root_ + "/" + name + ".yaml")
        << "name: " << name << "\nworld_size: " << world_size << "\ncheckpoint: {persist_every: 10}\n"
        << "args: [--config, tiny, --data, " << *data_ << ", --steps, '1000000', --log-format, json, "
        << "--threads, '1', --dist-timeout, '10', --memory-ckpt, 'on', --shard-optimizer]\n"
        << "env: {OMP_NUM_THREADS: '1'}\n";
    auto r = Bulwark({"submit", root_ + "/" + name + ".yaml", "--job", name});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  // Job `name`'s entry of status --json.
  static json JobOf(const json& s, const std::string& name) {
    for (const json& j : s.value("jobs", json::array())) {
      if (j.value("name", "") == name) return j;
    }
    return json::object();
  }
  static bool Holds(const json& job, const std::string& machine) {
    for (const json& m : job.value("placement", json::array())) {
      if (m == machine) return true;
    }
    return false;
  }
};

TEST_F(SlurmFleet, AMachineDownInOneJobDrainsItsNodeForThatJobAndTheOtherTrainsOn) {
  // Three machines for the jobs and a standby.
  ASSERT_TRUE(UpInAllocation(4, "--standby 1 --failure-rate 0.06"));
  WriteJob("a", 1);
  WriteJob("b", 2);
  json s = WaitFor("both jobs' steps", 120, [](const json& x) {
    return JobOf(x, "a").value("last_step", 0) >= 20 && JobOf(x, "b").value("last_step", 0) >= 20;
  });
  const json a = JobOf(s, "a"), b = JobOf(s, "b");
  ASSERT_EQ(a["placement"].size(), 1u) << s.dump();
  ASSERT_EQ(b["placement"].size(), 2u) << s.dump();
  std::string standby;
  for (const json& m : s["machines"]) {
    if (m["state"] == "standby") standby = m["id"];
  }
  ASSERT_FALSE(standby.empty()) << s.dump();
  // The batch script's node cannot leave the allocation: lose b's other one.
  std::ifstream rec(dir_ + "/backend.json");
  const json record = json::parse(rec, nullptr, false);
  ASSERT_TRUE(record.is_object());
  std::string victim;
  for (const json& m : b["placement"]) {
    if (m != record["batch_host"]) victim = m;
  }
  ASSERT_FALSE(victim.empty()) << s.dump();

  Inject("machine-down", victim);
  s = WaitFor("the standby replaces " + victim + " in b", 90, [&](const json& x) {
    const json jb = JobOf(x, "b");
    return jb.value("generation", 0) > b["generation"].get<int>() && jb.value("state", "") == "running" &&
           !Holds(jb, victim) && Holds(jb, standby);
  });
  const int64_t b_resumed = JobOf(s, "b")["last_step"], a_then = JobOf(s, "a")["last_step"];
  s = WaitFor("both jobs training on", 90, [&](const json& x) {
    return JobOf(x, "b").value("last_step", int64_t{0}) > b_resumed + 10 &&
           JobOf(x, "a").value("last_step", int64_t{0}) > a_then + 10;
  });
  // a never noticed: the same generation on the same machine.
  EXPECT_EQ(JobOf(s, "a")["generation"], a["generation"]) << s.dump();
  EXPECT_EQ(JobOf(s, "a")["placement"], a["placement"]) << s.dump();
  EXPECT_EQ(MachineState(s, victim), "evicted");

  auto inc = Bulwark({"incidents", "--job", "b", "--json"});
  const json incidents = json::parse(inc.out, nullptr, false);
  ASSERT_TRUE(incidents.is_array() && incidents.size() == 1) << inc.out << inc.err;
  const std::string reason = " Reason=bulwark job b incident " + std::to_string(incidents[0]["id"].get<int64_t>()) + ":";
  auto none = Bulwark({"incidents", "--job", "a", "--json"});
  EXPECT_EQ(json::parse(none.out, nullptr, false), json::array()) << none.out << none.err;
  std::string line;
  EXPECT_TRUE(Until(victim + " drained in Slurm", 60, [&] {
    line = NodeLine(victim);
    return line.find(" State=IDLE+DRAIN") != std::string::npos && line.find(reason) != std::string::npos;
  })) << line;
  auto drained = Slurm({"sinfo", "-h", "-N", "-t", "drain", "-o", "%N"});
  EXPECT_EQ(drained.out, victim + "\n") << "only b's lost node is drained";

  auto down = Bulwark({"down"});
  ASSERT_EQ(down.exit_code, 0) << down.err;
  EXPECT_TRUE(Until("no Slurm jobs left", 60, [&] { return Slurm({"squeue", "-h"}).out.empty(); }));
}

}  // namespace
}  // namespace bulwark
