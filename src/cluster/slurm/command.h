// Running a cluster manager's command line tools (scontrol, squeue, sbatch,
// scancel) with a deadline. The Slurm backend talks to Slurm only through
// these, and its tests replace the runner with a scripted one.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark::cluster {

struct CommandResult {
  int exit_code = -1;  // -1: it did not run, was killed by a signal, or ran past its deadline
  bool timed_out = false;
  std::string out, err;
  bool ok() const { return exit_code == 0; }
  // "scontrol update ...: exit 1: slurm_update error: Invalid node name" for logs.
  std::string Describe(const std::vector<std::string>& argv) const;
};

class CommandRunner {
 public:
  virtual ~CommandRunner() = default;
  // Runs argv (no shell) and collects its output; past `timeout_s` it is
  // killed and reported as timed out. Never throws.
  virtual CommandResult Run(const std::vector<std::string>& argv, double timeout_s) = 0;
};

// The real one: fork and exec, searching PATH.
class SystemRunner : public CommandRunner {
 public:
  CommandResult Run(const std::vector<std::string>& argv, double timeout_s) override;
};

// argv[0] found in PATH when it has no slash, then SpawnDetached
// (local_cluster.h), which execs without a PATH search: for srun, started
// detached so that the step outlives whoever asked for it.
Status SpawnCommandDetached(const std::vector<std::string>& argv, const std::string& log);

}  // namespace bulwark::cluster
