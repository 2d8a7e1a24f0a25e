// Supervisor: the job's ranks on this machine as real processes.
//
// Ranks are started from the agent's main thread with PR_SET_PDEATHSIG, so
// they die with the agent: a dead machine takes its ranks with it, as in
// life, and no orphan keeps a collective half-alive. Each rank's stdout and
// stderr go to its log file (appended across generations).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark::agent {

// Everything needed to start the ranks of one generation on this machine.
struct RankGroupSpec {
  int64_t generation = 0;
  std::vector<std::pair<int, int>> ranks;  // (global rank, local rank)
  int world_size = 0;
  int local_world_size = 0;
  std::string master_addr;
  int master_port = 0;
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::map<int, std::map<std::string, std::string>> rank_env;  // per global rank, over `env`
};

// The torchrun environment of one rank, plus the job's own variables: the
// one place that builds it (DESIGN.md, "Spec, assignment, status").
std::map<std::string, std::string> TorchrunEnv(const RankGroupSpec& spec, int rank, int local_rank);

struct RankExit {
  int rank = 0;
  int exit_code = 0;  // meaningful when signal == 0
  int signal = 0;
  std::chrono::system_clock::time_point at;
};

class Supervisor {
 public:
  explicit Supervisor(std::string ranks_dir) : ranks_dir_(std::move(ranks_dir)) {}
  ~Supervisor() { StopAll(); }

  // Stops whatever runs, then starts `spec`'s ranks. A rank that cannot be
  // started (no such program) shows up as an exit with code 127.
  Status Start(const RankGroupSpec& spec);
  // SIGTERM, then SIGKILL after `grace`; reaps them. Their exits are not
  // reported: the agent asked for them.
  void StopAll(std::chrono::milliseconds grace = std::chrono::milliseconds(1500));
  // Reaps ranks that ended since the last call.
  std::vector<RankExit> Reap();
  // Sends `sig` to `rank`; NotFound when it does not run here.
  Status Signal(int rank, int sig);

  std::string LogPath(int rank) const;
  std::vector<int> LiveRanks() const;
  // rank -> pid of the ranks running here.
  const std::map<int, pid_t>& Pids() const { return live_; }
  int64_t generation() const { return generation_; }
  // The lowest rank running here, or -1.
  int FirstRank() const;

 private:
  std::string ranks_dir_;
  int64_t generation_ = 0;
  std::map<int, pid_t> live_;  // rank -> pid
};

}  // namespace bulwark::agent
