// `bulwark run`: a job in torchrun's habit, one command from start to end.
//
//   bulwark run --machines 2 --standby 1 [--progress REGEX] [--name N] [--json] -- python train.py ARGS
//   bulwark run --standby 1 -- python train.py ARGS     (in an sbatch script or under salloc)
//
// Brings a cluster up, submits the command as the job (one rank per
// machine, or --ranks-per-machine), shows a live line (state, step, ETTR,
// incidents) and prints each incident as it is resolved, then brings
// everything down when the job ends or on Ctrl-C (SIGINT, SIGTERM).
// Inside a Slurm allocation (SLURM_JOB_ID set), or with --backend slurm,
// the cluster is `up --backend slurm`'s: the allocation's nodes are the
// machines (--machines defaults to them less --standby), and the end
// cancels the agents' steps, not the allocation (docs/slurm.md).
#pragma once

#include <functional>

#include "cli/args.h"
#include "common/status.h"

namespace bulwark::cli {

// The exit code `bulwark run` ends with: the job's own outcome.
constexpr int kRunCompleted = 0;     // every rank ended with 0 (or the trainer's done line)
constexpr int kRunStopped = 1;       // the controller gave up on it (see `incidents`)
constexpr int kRunInterrupted = 130; // Ctrl-C: the cluster was brought down mid-job

// `a.positional` is {"run", COMMAND, ARGS...}. `up` and `down` are the
// `bulwark up`/`down` commands (main.cc), given the same Args. An error is
// a Status (bad flags, a cluster that cannot start); the job's outcome is
// the exit code.
Result<int> RunJobCmd(const Args& a, const std::function<Status(const Args&)>& up,
                      const std::function<Status(const Args&)>& down);

}  // namespace bulwark::cli
