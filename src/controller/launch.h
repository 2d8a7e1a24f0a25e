// JobLaunch: the policy's JobSpec plus what an agent needs to start a rank.
// The policy sees only the spec; the actuator adds the command line.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "controller/job.h"

namespace bulwark::controller {

struct JobLaunch {
  JobSpec spec;                              // spec.command is argv joined, for people
  std::vector<std::string> argv;             // what each rank runs
  std::map<std::string, std::string> env;    // added to the torchrun environment
  std::string master_addr = "127.0.0.1";
  int master_port_base = 29500;              // generation g listens on base + g % 1000; Submit randomizes it
  // In-memory checkpoints are taken every step; every `persist_every` steps
  // (0: never) the agents also write them to `durable_dir`, which survives
  // losing a machine and its backup peer at once. 50 steps bounds what such
  // a double fault loses to a minute or two of training at the step times
  // we run, while the per-step copies cover the common single fault.
  int persist_every = kDefaultPersistEvery;
  // A directory every machine can reach; empty: the agent's default (the
  // CLI fills in <cluster dir>/durable/<job>).
  std::string durable_dir;
  // Policy fields the job file set (its `policy:`, controller/policy_fields.h),
  // laid over the cluster's policy for this job alone; empty: the cluster's.
  std::map<std::string, double> policy;

  static constexpr int kDefaultPersistEvery = 50;
};

// One release of the job (releases.h): what its ranks run. Release 1 is the
// job as submitted; `bulwark update` journals the next one.
struct Release {
  int number = 1;
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::string binary_hash;  // of argv[0]'s file when the CLI could read it; "" otherwise
  std::string who, why;     // the operator (user@host) and their reason
  int64_t created_ms = 0;
  bool now = false;         // applied at once, not at the next restart
};

}  // namespace bulwark::controller
