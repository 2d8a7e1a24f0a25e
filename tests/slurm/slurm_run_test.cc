// `bulwark run` inside a Slurm allocation, end to end on real Slurm
// (slurmctld and three slurmd on this host, support/slurm_fixture.h): an
// sbatch script calls `bulwark run --standby 1 -- SCRIPT` with no
// --backend and no --machines, as a user would, and a rank is killed
// midway. Checks that the run found the allocation by itself, ran the
// script's ranks as Slurm steps on its nodes under the torchrun contract,
// went on through the kill's incident, ended 0 when the job completed, and
// cancelled its steps while the allocation stayed; and that bad input is
// one line naming the fix.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "support/slurm_fixture.h"

namespace bulwark {
namespace {

class SlurmRun : public SlurmCluster {
 protected:
  int Nodes() const override { return 3; }

  std::string Read(const std::string& name) {
    std::ifstream in(root_ + "/" + name);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  // KEY=value from a rank's environment file.
  static std::string Field(const std::string& text, const std::string& key) {
    const std::string lines = "\n" + text;  // RANK is not LOCAL_RANK's tail
    const size_t at = lines.find("\n" + key + "=");
    if (at == std::string::npos) return "";
    const size_t from = at + key.size() + 2;
    return lines.substr(from, lines.find('\n', from) - from);
  }

  // The user's job: each rank writes the torchrun environment it was given
  // and where it ran, then prints steps for --progress and exits 0.
  void WriteScript() {
    const std::string script = root_ + "/train.sh";
    std::ofstream(script) << "#!/bin/bash\n"
                          << "env | grep -E '^(RANK|WORLD_SIZE|LOCAL_RANK|MASTER_ADDR|MASTER_PORT|SLURMD_NODENAME|"
                          << "SLURM_JOB_ID)=' > " << root_ << "/rank-$RANK.env\n"
                          << "for ((i = 1; i <= 40; i++)); do echo \"step $i loss 2.$((i % 10))\"; sleep 0.2; done\n";
    ::chmod(script.c_str(), 0755);
  }
};

TEST_F(SlurmRun, InsideAnAllocationRunsOnItsNodesEndsWithTheJobAndCancelsOnlyItsSteps) {
  // Outside an allocation, --backend slurm says where to call it from.
  ::unsetenv("SLURM_JOB_ID");
  auto outside = testing::Run({testing::BinDir() + "/bulwark", "run", "--backend", "slurm", "--dir", dir_, "--",
                               "/bin/true"});
  EXPECT_NE(outside.exit_code, 0);
  EXPECT_EQ(std::count(outside.err.begin(), outside.err.end(), '\n'), 1) << outside.err;
  EXPECT_NE(outside.err.find("not inside a Slurm allocation"), std::string::npos) << outside.err;
  EXPECT_NE(outside.err.find("sbatch script or under salloc"), std::string::npos) << outside.err;

  WriteScript();
  const std::string bulwark = testing::BinDir() + "/bulwark";
  // Every node is this host: agents reach the controller on 127.0.0.1.
  const std::string flags = " --listen 127.0.0.1 --dir " + dir_;
  std::ofstream(root_ + "/run.sh")
      << "#!/bin/bash\n"
      << "cd " << root_ << "\n"
      // Bad input: more machines than the allocation has nodes.
      << bulwark << " run --machines 3 --standby 1" << flags << " -- /bin/true 2> too-many.err; echo $? > too-many.rc\n"
      // The job: the allocation is found from the environment.
      << bulwark << " run --standby 1" << flags << " --json --progress 'step (?P<step>\\d+) loss (?P<loss>[0-9.]+)' -- "
      << root_ << "/train.sh > run.json 2> run.err; echo $? > run.rc\n"
      // Its steps are cancelled; scancel is asynchronous, so poll.
      << "for i in $(seq 1 120); do /usr/bin/squeue -h --steps --jobs=$SLURM_JOB_ID -o %j | grep -q bulwark-agent "
      << "|| break; sleep 0.5; done\n"
      << "/usr/bin/squeue -h --steps --jobs=$SLURM_JOB_ID -o '%i|%j' > steps-after.txt\n"
      << "/usr/bin/squeue -h --jobs=$SLURM_JOB_ID -o %T > allocation-after.txt\n";
  auto sb = Slurm({"sbatch", "--parsable", "-N3", "--no-kill", "--exclusive", "-D", root_, "-o", root_ + "/run.out",
                   root_ + "/run.sh"});
  ASSERT_EQ(sb.exit_code, 0) << sb.err;
  const std::string job = sb.out.substr(0, sb.out.find_first_of(";\n"));
  // A rank killed mid-run (from "another terminal"): the run goes on
  // through the incident, as it does on this host.
  json s;
  auto stepping = [&] {
    s = Query("status");
    return s.is_object() && s["job"].is_object() && s["job"]["last_step"] >= 5;
  };
  // A run that failed ends the script: no use waiting out the deadline.
  auto ended = [&] { return Slurm({"squeue", "-h", "-j", job}).out.empty(); };
  ASSERT_TRUE(Until("the job's steps", 120, [&] { return stepping() || ended(); }) && stepping())
      << Read("run.out") << Read("run.err") << s.dump();
  ASSERT_EQ(s["job"]["placement"].size(), 2u) << s.dump();
  // The allocation's third node is held back as the standby.
  ASSERT_EQ(s["machines"].size(), 3u) << s.dump();
  int standbys = 0;
  for (const json& m : s["machines"]) {
    if (m["state"] != "standby") continue;
    ++standbys;
    EXPECT_EQ(s["job"]["placement"].dump().find(m["id"].dump()), std::string::npos) << s.dump();
  }
  EXPECT_EQ(standbys, 1) << s.dump();
  Inject("kill", s["job"]["placement"][1]);
  ASSERT_TRUE(Until("the batch script's end", 240, ended))
      << Read("run.out") << Read("run.err");

  EXPECT_NE(Read("too-many.rc"), "0\n");
  const std::string too_many = Read("too-many.err");
  EXPECT_EQ(std::count(too_many.begin(), too_many.end(), '\n'), 1) << too_many;
  EXPECT_NE(too_many.find("run: --machines 3 and --standby 1 need 4 nodes, but job " + job + " has 3"),
            std::string::npos) << too_many;
  EXPECT_NE(too_many.find("allocate more nodes (sbatch -N) or ask for fewer"), std::string::npos) << too_many;

  ASSERT_EQ(Read("run.rc"), "0\n") << Read("run.json") << Read("run.err") << Read("run.out");
  const json run = json::parse(Read("run.json"), nullptr, false);
  ASSERT_TRUE(run.is_object()) << Read("run.json");
  EXPECT_EQ(run["backend"], "slurm");
  EXPECT_EQ(run["exit_code"], 0);
  EXPECT_EQ(run["outcome"].get<std::string>().rfind("completed at step 40", 0), 0u) << run.dump();
  EXPECT_EQ(run["incidents"].size(), 1u) << "the kill's incident:\n" << run.dump();
  const json placement = run["job"]["placement"];
  ASSERT_EQ(placement.size(), 2u) << run.dump();
  const std::set<std::string> nodes = {"n1", "n2", "n3"};
  for (int rank = 0; rank < 2; ++rank) {
    const std::string env = Read("rank-" + std::to_string(rank) + ".env");
    SCOPED_TRACE("rank " + std::to_string(rank) + ":\n" + env);
    EXPECT_EQ(Field(env, "RANK"), std::to_string(rank));
    EXPECT_EQ(Field(env, "WORLD_SIZE"), "2");
    EXPECT_EQ(Field(env, "LOCAL_RANK"), "0");
    EXPECT_FALSE(Field(env, "MASTER_ADDR").empty());
    EXPECT_FALSE(Field(env, "MASTER_PORT").empty());
    // The rank ran in a step of this allocation, on the node placed.
    EXPECT_EQ(Field(env, "SLURM_JOB_ID"), job);
    EXPECT_EQ(Field(env, "SLURMD_NODENAME"), placement[rank].get<std::string>());
    EXPECT_EQ(nodes.count(Field(env, "SLURMD_NODENAME")), 1u);
  }
  EXPECT_EQ(Read("steps-after.txt").find("bulwark-agent"), std::string::npos) << Read("steps-after.txt");
  EXPECT_EQ(Read("allocation-after.txt"), "RUNNING\n") << "run cancelled the allocation itself";
  auto drained = Slurm({"sinfo", "-h", "-N", "-t", "drain", "-o", "%N %E"});
  EXPECT_EQ(drained.out, "") << "drained by run";
}

}  // namespace
}  // namespace bulwark
