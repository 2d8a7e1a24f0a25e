// Supervisor: the job's ranks on this machine as real processes.
//
// Ranks are started from the agent's main thread with PR_SET_PDEATHSIG, so
// they die with the agent: a dead machine takes its ranks with it, as in
// life, and no orphan keeps a collective half-alive. Each rank's stdout and
// stderr go to its log file (appended across generations).
//
// A new generation reuses processes where it can (handoff.h): a rank that
// waits for it keeps its process, a pre-spawned spare takes a rank; the
// agent then tells them their rank over the rank link. Spares are started
// with the job's command and environment, without a rank, and
// BULWARK_PRESPAWN=1; their output goes to spare-<pid>.log until they
// take a rank.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "agent/handoff.h"
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
  bool elastic = false;  // any world size is the same job (wire Command.elastic)
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
  ~Supervisor() {
    StopAll();
    StopSpares();
  }

  // Realizes `spec`'s ranks (handoff.h): stops the live processes that get
  // no rank, keeps the rejoining ones, adopts spares, starts the rest. The
  // caller must send each non-cold handoff its ASSIGN. A rank that cannot be
  // started (no such program) shows up as an exit with code 127. With
  // `reuse` false every live process is stopped and every rank is cold.
  Result<std::vector<Handoff>> Start(const RankGroupSpec& spec, bool reuse = true);
  // Starts one spare of `spec`'s job (see the top of this file).
  Status Prespawn(const RankGroupSpec& spec);
  // The process `pid` (a rank or a spare) said it waits for an ASSIGN.
  void MarkWaiting(pid_t pid);
  // A live rank process whose identity matches `spec`'s and that has not said
  // it waits (it may still be inside a failing collective).
  bool AnyLiveNotWaiting(const RankGroupSpec& spec) const;
  // Ends a waiting rank's process without reporting its exit (the agent
  // reports what it stands for itself). NotFound when no such rank waits.
  Status Discard(int rank);
  // Ends every spare, but those of the jobs in `keep` (Identities).
  void StopSpares(const std::set<std::string>& keep = {});
  // The spares of `identity` alive (and of them, those waiting for an ASSIGN).
  size_t SpareCount(const std::string& identity) const;
  size_t WaitingSpareCount(const std::string& identity) const;
  // The rank `pid` runs, or -1.
  int RankOf(pid_t pid) const;
  // What must match for a process to take a rank of `spec` (handoff.h).
  static std::string Identity(const RankGroupSpec& spec);
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
  // Forks and execs `argv` with `env` over the agent's environment, output
  // to `log`; the pid, or an error.
  Result<pid_t> Spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                      const std::string& log, const std::string& banner);
  // SIGTERM, then SIGKILL after `grace`; reaps them.
  static void Stop(std::vector<pid_t> pids, std::chrono::milliseconds grace);

  int64_t generation_ = 0;
  std::map<int, pid_t> live_;  // rank -> pid
  std::string identity_;       // of the live ranks' job
  std::map<pid_t, bool> waiting_;  // live rank pids that said LOST or WAIT
  std::vector<RunningProcess> spares_;
};

}  // namespace bulwark::agent
