// The agent's own Prometheus metrics (GET /metrics on the agent's port): what
// only this machine knows or knows first. Its ranks, the checkpoint shard
// copies it holds, what its store pushed and persisted and how long that
// took, its health checks, and the newest step it saw. The controller's
// /metrics gives the job-wide view; these let a dashboard tell which machine
// is slow to push, short of backups or failing an inspection.
//
// The agent's main loop owns most of this state, so it publishes an
// AgentSnapshot once per loop (100 ms) and the scrape thread renders that
// copy. It never reaches into the loop's state. The shard store's
// holdings and stats are read at scrape time under the store's own lock.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "agent/inspector.h"
#include "agent/shard_store.h"

namespace bulwark::agent {

struct AgentSnapshot {
  std::string machine;
  double uptime_s = 0;
  bool registered = false;            // the controller accepted this agent's registration
  double since_report_ok_s = 0;       // since the controller last acknowledged a report
  int64_t generation = 0;             // of the ranks it runs (0: none started yet)
  std::vector<int> live_ranks;
  std::map<int, int64_t> rank_restarts;  // by rank: a new process seen in place of an earlier one
  // Rank exits the agent reaped and did not ask for, by (rank, how):
  // how = "error" (non-zero code), "signal", "peer_lost" (kExitPeerLost).
  std::map<std::pair<int, std::string>, int64_t> rank_exits;
  int64_t job_step = 0;               // newest step rank 0 reported here (0: rank 0 is elsewhere)
  bool inspected = false;             // `health` holds a reading
  HealthReading health;
  std::map<std::string, int64_t> inspection_failures;  // by check: device, disk, memory, nic, process
};

// The Prometheus text (0.0.4) of one scrape. Every family is written even
// when empty of samples, so that the set of names does not depend on what
// happened yet.
std::string RenderAgentMetrics(const AgentSnapshot& s, const std::vector<ShardHolding>& holdings,
                               const ShardStats& stats);

}  // namespace bulwark::agent
