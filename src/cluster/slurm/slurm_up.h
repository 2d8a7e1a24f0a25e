// `bulwark up --backend slurm` and `bulwark down` on a Slurm cluster: the
// process mechanics, as local_cluster.h is for the local backend. `up` runs
// inside an allocation (sbatch or salloc); the controller runs where `up`
// runs and every agent is a task of the allocation (docs/slurm.md).
#pragma once

#include <string>

#include "cluster/layout.h"
#include "cluster/slurm/command.h"
#include "cluster/slurm/slurm_text.h"
#include "common/status.h"

namespace bulwark::cluster {

struct SlurmUpRequest {
  int machines = 0;  // 0: every node of the allocation that is not a standby
  int standby = 0;
  int grow = 0;      // nodes the controller may add as jobs of their own
  std::string bulwark, dir;  // absolute
  std::string command = "up --backend slurm";  // what the errors name: `up` or `run`
};

// Whether this process runs inside a Slurm allocation: Slurm set
// SLURM_JOB_ID and its node list (sbatch, salloc, srun). `bulwark run`
// then takes the allocation's nodes as its machines.
bool InSlurmAllocation();

// Reads the allocation from the environment Slurm gives its jobs
// (SLURM_JOB_ID, SLURM_JOB_NODELIST, SLURMD_NODENAME) and picks the nodes
// that get agents: the first machines + standby, the rest kept spare for
// replenishment. Errors say what to run instead.
Result<SlurmRecord> PlanSlurmUp(CommandRunner& run, const SlurmUpRequest& req);

// The host the controller listens on, for agents on other nodes:
// `requested` (--listen), else this host's name. It must resolve here, or
// the controller could not bind it.
Result<std::string> ControllerHost(const std::string& requested);

// Starts every agent of `record` as an srun step, detached (it outlives
// `up`), each logging to its machine's agent.log.
Status LaunchSlurmAgents(const Layout& layout, const SlurmRecord& record);

// `down`: cancels the allocation's agent steps and every job the
// controller submitted; the allocation itself stays (it is the user's).
// Returns how many steps and jobs it cancelled.
Result<int> StopSlurmAgents(const Layout& layout, CommandRunner& run);

}  // namespace bulwark::cluster
