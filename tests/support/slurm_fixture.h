// The Slurm tests' fixture: a throwaway Slurm on this host (slurmctld and N
// slurmd, support/slurm_cluster.sh) under the test's temp dir, with every
// Slurm client command of the test pointed at it (SLURM_CONF).
//
// Skips only when Slurm is not installed or the test is not root;
// `make test` installs Slurm (scripts/install-deps.sh) and runs as root.
// The test defines BULWARK_SLURM_SCRIPT (tests/CMakeLists.txt).
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "support/cluster_fixture.h"

namespace bulwark {

class SlurmCluster : public Cluster {
 protected:
  // Nodes n1..nN; the Machine-down test needs a fourth to grow into.
  virtual int Nodes() const { return 4; }

  void SetUp() override {
    Cluster::SetUp();
    slurm_ = root_ + "/slurm";
    // With this process's pid: should it be killed (a ctest timeout), the
    // script's reaper still stops the daemons.
    auto r = testing::Run({"/bin/bash", BULWARK_SLURM_SCRIPT, "start", slurm_, std::to_string(Nodes()),
                           std::to_string(::getpid())},
                          {}, 120);
    if (r.exit_code == 3) GTEST_SKIP() << r.err;
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    started_ = true;
    // Every command below (bulwark, sbatch, scontrol) talks to this cluster.
    ::setenv("SLURM_CONF", (slurm_ + "/slurm.conf").c_str(), 1);
  }

  void TearDown() override {
    if (started_) {
      Down();  // bulwark down: agents' steps and the controller's jobs
      testing::Run({"/bin/bash", BULWARK_SLURM_SCRIPT, "stop", slurm_}, {}, 60);
      ::unsetenv("SLURM_CONF");
      RemoveIfPassed();  // Slurm's own state lives under root_ too
    }
  }

  // Slurm's client tools (Debian installs them in /usr/bin; Process execs without a PATH search).
  testing::ProcessResult Slurm(std::vector<std::string> argv) {
    argv[0] = "/usr/bin/" + argv[0];
    return testing::Run(argv, {}, 30);
  }

  // Polls until `pred` holds; false (with the last value in the failure
  // message) after `seconds`.
  bool Until(const std::string& what, double seconds, const std::function<bool()>& pred) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int>(seconds * 1000));
    while (std::chrono::steady_clock::now() < deadline) {
      if (pred()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
    if (pred()) return true;
    ADD_FAILURE() << "timed out waiting for " << what << "\ncontroller log:\n"
                  << testing::Run({"/usr/bin/tail", "-n", "40", dir_ + "/controller.log"}).out
                  << "\nsinfo:\n" << Slurm({"sinfo", "-N", "-o", "%N %T %E"}).out
                  << "\nsqueue:\n" << Slurm({"squeue", "-s"}).out;
    return false;
  }

  // `bulwark up --backend slurm FLAGS` as the batch script of an sbatch
  // allocation of `nodes` nodes, held while the controller runs; true once
  // an agent on every node is heard. --no-kill: a failed node must not take
  // the whole allocation down with it. Every node is this host, so agents
  // reach the controller on 127.0.0.1 (the default, this host's name, would
  // need it to resolve).
  bool UpInAllocation(int nodes, const std::string& flags) {
    std::ofstream(root_ + "/up.sh") << "#!/bin/bash\n"
                                    << testing::BinDir() << "/bulwark up --backend slurm " << flags
                                    << " --listen 127.0.0.1 --dir " << dir_ << " || exit 1\n"
                                    << "exec tail --pid=$(cat " << dir_ << "/controller.pid) -f /dev/null\n";
    // -D: Slurm writes the job's resize scripts (slurm_job_N_resize.sh) into its working directory.
    auto sb = Slurm({"sbatch", "--parsable", "-N" + std::to_string(nodes), "--no-kill", "--exclusive", "-D", root_,
                     "-o", root_ + "/up.out", root_ + "/up.sh"});
    EXPECT_EQ(sb.exit_code, 0) << sb.err;
    if (sb.exit_code != 0) return false;
    const bool heard = Until(std::to_string(nodes) + " agents registered", 90, [&] {
      json s = Query("status");
      int n = 0;
      if (s.is_object()) {
        for (const json& m : s["machines"]) n += m["last_heard_s_ago"].get<double>() < 3.0;
      }
      return n == nodes;
    });
    if (!heard) ADD_FAILURE() << testing::Run({"/bin/cat", root_ + "/up.out"}).out;
    return heard;
  }

  std::string NodeLine(const std::string& node) { return Slurm({"scontrol", "--oneliner", "show", "node", node}).out; }

  std::string slurm_;
  bool started_ = false;
};

}  // namespace bulwark
