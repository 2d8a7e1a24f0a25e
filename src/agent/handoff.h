// Handoff: how the agent realizes a generation's ranks on its machine with
// the processes it already has (docs/recovery.md). Pure.
//
// A START_RANKS is desired state; the controller does not know processes.
// For each wanted rank the agent prefers, in order:
//   rejoin      a live rank process of the same job (same command and
//               environment) that said it waits for the next generation:
//               it keeps its process and its loaded model;
//   prespawned  a spare process of the same job, set up and waiting;
//   cold        a new process (fork/exec, libtorch load, setup).
// Live processes that get no rank are stopped.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace bulwark::agent {

enum class HandoffPath { kRejoin, kPrespawned, kCold };
const char* HandoffPathName(HandoffPath p);

struct RunningProcess {
  pid_t pid = 0;
  std::string identity;  // JobIdentity of what it was started with
  bool waiting = false;  // said LOST/WAIT (a rank) or READY (a spare)
};

struct Handoff {
  int rank = 0;
  HandoffPath path = HandoffPath::kCold;
  pid_t pid = 0;  // the process that takes the rank; 0 for cold
};

struct HandoffPlan {
  std::vector<Handoff> ranks;  // in the order of `wanted`
  std::vector<int> stop;       // live ranks whose process gets no rank
};

// `live`: the previous generation's rank processes by rank; `spares`: the
// pre-spawned ones. A waiting live process keeps its own rank when that rank
// is wanted, else takes any wanted rank left.
HandoffPlan PlanHandoff(const std::vector<int>& wanted, const std::string& identity,
                        const std::map<int, RunningProcess>& live, const std::vector<RunningProcess>& spares);

// What makes two starts the same job on this machine: the command and every
// variable except those a generation sets per rank (rank, world, master,
// restart count, backup assignment), which an ASSIGN carries.
std::string JobIdentity(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env);

}  // namespace bulwark::agent
