// ShardStore::Impl: the store's state and threads, shared by shard_store.cc
// (ranks: the Unix socket, sending, persisting, releasing) and
// shard_peers.cc (other agents: receiving backups, serving and fetching
// copies). Private to src/agent.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "agent/shard_store.h"
#include "rank_client/shard_region.h"
#include "common/mutex.h"

namespace bulwark::agent {

using RegionPtr = std::shared_ptr<rank_client::ShardRegion>;
using Clock = std::chrono::steady_clock;

// Every transfer between agents gives up after this long without progress.
constexpr int kTransferTimeoutS = 10;
// A connect to another agent gives up sooner: a dead machine answers
// nothing, and every second a restore waits on it is the whole job's.
// Peers share a fabric (a round trip well under a millisecond), so the
// only slow handshake of a live peer is a dropped SYN (its accept queue
// full for a moment), which Linux resends after 1 s: 1.5 s still meets it.
constexpr int kConnectTimeoutMs = 1500;

inline double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

class ShardStore::Impl {
 public:
  std::string machine_, socket_path_, host_, token_;
  ino_t socket_ino_ = 0;  // the inode of the socket file it bound
  std::function<void(const std::string&)> log_;
  int unix_fd_ = -1, tcp_fd_ = -1, tcp_port_ = 0;
  int wake_[2] = {-1, -1};

  // Set before the threads start and constant after: the fields above.
  // Everything below that names mu_ is shared by the threads.
  mutable Mutex mu_;
  CondVar work_cv_;
  struct Primary {
    RegionPtr current, previous;
    bool peer_writes = false;  // the backup peer writes this rank's backup itself: no push
  };
  struct Fetched {
    std::string machine;
    RegionPtr region;
  };
  struct Work {
    int rank, slot;
    int64_t step;
    RegionPtr region;
    int64_t conn;
    bool push;
  };
  std::map<int, Primary> primaries_ GUARDED_BY(mu_);
  // The job as this machine's ranks described it (REGION): pushed images
  // must name a rank of this world and be no larger than kMaxImageRatio x
  // the largest shard a local rank writes (shards of one job differ by
  // their pipeline stage's share, not by orders of magnitude).
  int world_size_ GUARDED_BY(mu_) = 0;
  size_t largest_local_ GUARDED_BY(mu_) = 0;
  static constexpr size_t kMaxImageRatio = 8;
  std::map<int, RegionPtr> backups_ GUARDED_BY(mu_);
  std::map<int, std::vector<Fetched>> fetched_ GUARDED_BY(mu_);
  ShardRoutes routes_ GUARDED_BY(mu_);
  // Fetches: each SetRoutes starts a generation and cancels the older ones
  // (their sockets in flight are shut down; what they fetched is dropped),
  // so no caller ever waits for a fetch. fetching_: the newest is running.
  bool fetching_ GUARDED_BY(mu_) = false;
  int64_t fetch_gen_ GUARDED_BY(mu_) = 0;
  std::multimap<int64_t, int> fetch_socks_ GUARDED_BY(mu_);  // generation -> its sockets in flight
  int fetchers_ GUARDED_BY(mu_) = 0;                    // fetch threads still running
  CondVar fetchers_done_;
  std::deque<Work> work_ GUARDED_BY(mu_);
  bool processing_ GUARDED_BY(mu_) = false;  // the worker sends or persists one, outside mu_
  CondVar processed_;
  // Persisted steps kept for a rollback (ShardStore::KeepDurable).
  std::vector<int64_t> keep_steps_ GUARDED_BY(mu_);
  std::map<int64_t, int> conns_ GUARDED_BY(mu_);                  // connection id -> fd
  std::map<int64_t, int> owner_ GUARDED_BY(mu_);                  // connection id -> the rank that registered its region
  std::vector<std::pair<int64_t, int>> waiting_ GUARDED_BY(mu_);  // (connection, rank) restores waiting for fetches
  int64_t next_conn_ GUARDED_BY(mu_) = 1;
  ShardStats stats_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::atomic<bool> stopping_{false};  // read by connection threads without mu_
  std::thread local_, tcp_, worker_;
  // Peer connections are served on their own threads (a backup stream stays
  // open and must not hold up a fetch); the destructor waits for them.
  int serving_ GUARDED_BY(mu_) = 0;
  CondVar served_;
  // The worker thread's alone (and the destructor's, after it is joined).
  // The worker's connection to the backup peer, kept open across steps: a
  // connection per push would leave thousands of sockets in TIME_WAIT, and
  // one of their ports could be the next generation's rendezvous port.
  int push_fd_ = -1;
  std::string push_to_;

  void Wake();

  // --- ranks (Unix socket) ---------------------------------------------
  void LocalLoop();
  void Handle(int64_t conn, int sock, const std::string& msg, int fd);
  void OfferLocked(int sock, int rank) REQUIRES(mu_);
  void AnswerWaiting();

  // --- sending, persisting, releasing ---------------------------------
  void WorkLoop();
  void Process(const Work& w, const ShardRoutes& routes);
  Status PushOnce(const std::string& addr, int rank, int64_t step, const uint8_t* image, size_t bytes);

  // A kept connection may have been closed by the peer meanwhile (it
  // restarted): one retry on a fresh connection.
  Status Push(const std::string& addr, int rank, int64_t step, const uint8_t* image, size_t bytes);
  void Prune(const std::string& dir, int rank) EXCLUDES(mu_);
  // One durable copy, and its step directory once no rank's copy is left.
  static bool RemoveDurable(const std::string& dir, int64_t step, int rank);

  // --- peers (TCP) -------------------------------------------------------
  void TcpLoop();

  // Requests on one connection until the peer closes it or the store stops.
  void ServeConnection(int c);
  Status Serve(int c);

  // Receives into the older of the rank's two backup slots; the header goes
  // in last, so a transfer cut short never looks like a complete image.
  Status Receive(int c, int rank, uint64_t bytes);
  // Why a pushed image of `bytes` for `rank` is refused; OK when allowed.
  Status AdmitPush(int rank, uint64_t bytes) REQUIRES(mu_);
  Status SendCopies(int c, int rank);

  // Pulls every copy `source` holds of its rank into a fresh region, unless
  // fetch generation `gen` is cancelled first.
  Result<RegionPtr> Fetch(const ShardRoutes::Source& source, int64_t gen);
  Result<RegionPtr> ReceiveCopies(int fd, const ShardRoutes::Source& source);
  // Runs on its own detached thread; counted in fetchers_.
  void FetchAll(ShardRoutes routes, std::vector<int> ranks, int64_t gen);
  // Starts a new fetch generation: the older ones end at once, unheard.
  int64_t CancelFetchesLocked() REQUIRES(mu_);
};

}  // namespace bulwark::agent
