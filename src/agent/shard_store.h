// ShardStore: the agent's side of every-step in-memory checkpoints.
//
// It holds, in this machine's memory:
//   primary  the regions its ranks write their shards into (client/), kept
//            after a rank dies so a rank restarted in place restores from
//            them; the region of the previous run of a rank stays until the
//            new run has sealed an image of its own. With replicated state
//            a region also holds the backup of another machine's rank,
//            written by this machine's rank from its own memory;
//   backup   the newest two images of ranks on other machines, pushed here
//            by their agents (ZeRO-1 jobs);
//   fetched  copies of this machine's ranks' shards pulled from the
//            machines the controller named, before a restore.
//
// For each image a rank seals it pushes a copy to the backup peer the
// controller chose (unless the peer writes that backup itself: the rank's
// region said PEERWRITES), persists every `persist_every` steps, then
// releases the slot back to the rank. A newer image of the same rank supersedes an older
// one still waiting: only the newest is worth sending.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark::agent {

struct ShardRoutes {
  struct Source {
    int rank = 0;
    std::string machine, addr;
  };
  std::string backup_machine, backup_addr;  // empty: no peer
  std::vector<Source> restore_from;         // other machines holding copies of our ranks
  std::string durable_dir;                  // empty: no persistence
  int persist_every = 0;
};

struct ShardHolding {
  int rank = 0;
  int64_t step = 0;
  bool backup = false;
};

// Durations as the buckets of a Prometheus histogram: counts, not samples,
// so the store's memory stays fixed however long the job runs.
struct LatencyBuckets {
  // From a loopback push of a tiny model's shard (~1 ms) to a slow disk's
  // persist of a large one (seconds).
  static constexpr int kBounds = 11;
  static constexpr double kBoundsMs[kBounds] = {1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 5000};
  int64_t at_or_below[kBounds] = {};  // cumulative
  int64_t count = 0;
  double sum_ms = 0;
  void Observe(double ms) {
    for (int i = 0; i < kBounds; ++i) at_or_below[i] += ms <= kBoundsMs[i];
    ++count;
    sum_ms += ms;
  }
};

// What the store did so far, for the agent's log, /metrics and the benchmarks.
struct ShardStats {
  int64_t pushed = 0, persisted = 0, superseded = 0;
  int64_t push_failures = 0;  // consecutive: back to 0 once a push succeeds
  int64_t push_failures_total = 0, persist_failures = 0;
  int64_t refused = 0;  // peer connections or pushed images refused (shard_auth.h, size and rank checks)
  double last_push_ms = 0, last_persist_ms = 0, last_fetch_ms = 0;
  LatencyBuckets push, persist;
};

class ShardStore {
 public:
  // Listens on the Unix socket `socket_path` for ranks and on an ephemeral
  // TCP port of `host` for peers, who must prove they hold the cluster
  // `token` (shard_auth.h) before anything else. `log` receives one line
  // per notable thing, refusals included.
  static Result<std::unique_ptr<ShardStore>> Start(const std::string& machine, const std::string& socket_path,
                                                   const std::string& host, const std::string& token,
                                                   std::function<void(const std::string&)> log);
  ~ShardStore();

  std::string addr() const;  // host:port of the shard server
  // Routes for the ranks being started now; fetches copies of `ranks` from
  // the sources before any of them asks to restore (a restore waits for the
  // fetch). Never waits itself: a fetch for earlier routes still under way
  // is cancelled and what it fetched is dropped.
  void SetRoutes(const ShardRoutes& routes, const std::vector<int>& ranks);
  std::vector<ShardHolding> Holdings() const;
  // The machine was given back and acquired again (requeue mode): forget
  // every copy held, own and backups, as a fresh machine would not have them,
  // and cancel a fetch under way.
  void Forget();
  // Each periodic bitwise check names the persisted steps a rollback may
  // need (Command.keep_steps): pruning keeps, beyond the newest, the two
  // newest persisted steps at or below each.
  void KeepDurable(std::vector<int64_t> steps);
  // A rollback to at most `step` (Command.rollback): removes the durable
  // copies of `ranks` above it, which may hold a drift, once a persist under
  // way has landed (the ranks are stopped, so no new one starts). Returns
  // how many it removed.
  int DiscardDurableAfter(const std::string& dir, const std::vector<int>& ranks, int64_t step);
  ShardStats Stats() const;
  // Emulated memory corruption: flips a bit in the newest image `rank` wrote
  // here; returns its step, nullopt when there is none.
  std::optional<int64_t> Corrupt(int rank);

  class Impl;

 private:
  explicit ShardStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace bulwark::agent
