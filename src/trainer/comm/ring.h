// A communicator whose membership change touches a constant number of
// peers: the cross-replica reduction of elastic data parallelism
// (elastic.h) when the replicas regroup without the one they lost.
//
// Gloo's full mesh re-forms W x (W - 1) connections at every generation,
// and its store serves W^2 lookups: 17.5 ms at 2 ranks, 2.6 s at 64 on
// this host (bench/elastic/regroup.sh). Here each rank keeps one TCP link
// to each of its two ring neighbours, and the links outlive a generation:
// when a replica is lost, only its two neighbours connect to each other;
// every other survivor re-uses both its links and only trades one frame
// with each neighbour to agree on the new generation. A rank's rendezvous
// is three store operations whatever W is.
//
// The exact fixed-point sum of elastic.cc does not care about the ring's
// order, so a ring all-reduce gives the bits a mesh gives.
//
// Frames carry the generation's nonce: what a failed generation left on a
// kept link is skipped by the next one. A collective that fails on one rank
// (a dead neighbour's EOF, a timeout) sends ABORT to both neighbours, which
// fail and pass it on, so the failure goes round the ring the way a dead
// peer's closed sockets reach every rank of a mesh. A link left with half a
// frame on it is closed instead, and rebuilt by the next generation.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/ring_layout.h"
#include "common/status.h"

namespace c10d {
class Store;
}

namespace bulwark::trainer {

// What a process keeps between generations: its listener and its links.
// Not thread-safe; one Ring uses it at a time.
class RingLinks {
 public:
  // Listens on the address the ring's peers reach this process at: the
  // interface GLOO_SOCKET_IFNAME names (the agent's choice for Gloo too),
  // else loopback for a rendezvous on this host, else the hostname's.
  static Result<std::unique_ptr<RingLinks>> Listen(const std::string& master_addr);
  // Listens at `identity` ("addr:port"): the fixed address of an agent's
  // slot, which the controller names in its neighbours' plans before this
  // process starts (BULWARK_RING_ADDR).
  static Result<std::unique_ptr<RingLinks>> ListenAt(const std::string& identity, double timeout_s);
  ~RingLinks();
  const std::string& identity() const { return identity_; }  // "addr:port"

  // Of the last generation formed: neighbour links kept from an earlier
  // one, links connected or accepted anew, and of those the ones this
  // process dialled (RingLayout's tiers say who dials: ring_layout.h).
  int kept() const { return kept_; }
  int made() const { return made_; }
  int dialled() const { return dialled_; }

  // A collective's wait also ends when `fd` has bytes and `asked()` says
  // the generation is over (the agent's word on the rank link). A peer that
  // hangs (a frozen machine) sends neither data nor EOF, so without this the
  // ring waits out its timeout and the agent, tired of waiting, stops this
  // process and its state with it (docs/recovery.md).
  void InterruptOn(int fd, std::function<bool()> asked) {
    interrupt_fd_ = fd;
    interrupted_ = std::move(asked);
  }

  // The all-reduce's layout (common/ring_layout.h's TwoLevel): groups of at most `g`
  // consecutive ranks; 1 keeps the flat ring at every width; 0 picks
  // ceil(sqrt(W)) from W = 16 on, flat below.
  void SetGroupSize(int g) { group_ = g; }

 private:
  friend class Ring;
  using Key = std::pair<std::string, int>;  // the peer's identity, a channel
  RingLinks() = default;
  static Result<std::unique_ptr<RingLinks>> Bind(const std::string& where, double timeout_s);
  void Add(const Key& k, int fd);
  void Close(const Key& k);
  void CloseFd(int fd);
  int listen_fd_ = -1;
  std::string identity_;
  std::map<Key, int> fds_;
  std::set<int> fresh_;  // links made by the generation being formed
  int kept_ = 0, made_ = 0, dialled_ = 0;
  int interrupt_fd_ = -1;  // InterruptOn
  std::function<bool()> interrupted_;
  int group_ = 0;  // SetGroupSize
};


// RingPlan (common/ring_layout.h): what a generation without a store forms from.


// One generation's ring: rank r's neighbours are r - 1 and r + 1 (mod W).
class Ring {
 public:
  // `store` is the generation's store (rank 0 hosts it); it must outlive
  // the Ring.
  static Result<std::unique_ptr<Ring>> Form(c10d::Store& store, int rank, int world, double timeout_s,
                                            RingLinks& links);
  // The same without a store: every address comes from `plan`, and so does
  // the layout's group size (the controller cut every rank's plan by it; a
  // rank's own SetGroupSize serves store generations). Only the collectives
  // and point-to-point messages to the ranks the plan names can run on it.
  static Result<std::unique_ptr<Ring>> Form(const RingPlan& plan, int rank, int world, double timeout_s,
                                            RingLinks& links);
  // A generation that ends without a failure still tells its neighbours,
  // so a peer left inside a collective fails at once.
  ~Ring();

  Status AllReduce(std::vector<torch::Tensor>& tensors, bool max);
  // In two levels there is no ring of all W: a gather and a broadcast are
  // the all-reduce's sum of the tensor's bits as integers, each element
  // nonzero on one rank only (x + 0 = x, bit for bit).
  Status AllGatherChunks(torch::Tensor& flat);
  Status Broadcast(torch::Tensor& t, int root);
  // Point to point, on links of their own (channel 1), so a transfer in
  // flight never shares a socket with the ring's collectives. Send queues
  // `t` for a sender thread; WaitSends waits for the queue.
  Status Send(const torch::Tensor& t, int dst, int tag);
  Status Recv(torch::Tensor& t, int src, int tag);
  Status WaitSends();
  // Waits for a frame the predecessor never sends, until the timeout.
  Status RecvNeverSent();

 private:
  Ring(c10d::Store* store, int rank, int world, double timeout_s, RingLinks& links);
  static Result<std::unique_ptr<Ring>> Finish(std::unique_ptr<Ring> r);
  Status Link();
  Status Handshake(const std::string& peer, bool* retry);
  Result<int> DialNeighbour(const std::string& peer);
  using Pieces = std::vector<std::pair<const char*, size_t>>;
  // One ring among some of this generation's ranks: where this rank sends
  // and receives on it, the ring's size and this rank's place.
  struct SubRing {
    int to = -1, from = -1, size = 1, pos = 0;
  };
  // Chunk c (of a SubRing's size) of tensor i, as a slice of it.
  using Cut = std::function<torch::Tensor(size_t i, int c)>;
  // A ring's reduce-scatter and/or all-gather of `flat` cut by `cut`, its
  // frames numbered from `tag0`: after the reduce-scatter, `pos` holds
  // chunk pos + 1 reduced.
  Status RingPass(const SubRing& ring, std::vector<torch::Tensor>& flat, const Cut& cut, bool max, bool scatter,
                  bool gather, int64_t tag0);
  Status TwoLevelAllReduce(std::vector<torch::Tensor>& flat, bool max);
  Status SumOfOneRanksBits(torch::Tensor& t);
  Status FormLayout();
  SubRing Sub(const std::string& pred, const std::string& succ, int size, int pos);
  Status Exchange(int to, const Pieces& out, int from, char* in, size_t in_len, int64_t tag);
  Status ReadFrame(int fd, int64_t tag, char* in, size_t in_len, bool* eof);
  Status Fail(const Status& why);
  std::string Identity(int rank);  // throws what the store throws, or when no one knows it
  Result<std::string> PeerAddress(int rank);
  int Fd(const std::string& peer, int channel);
  Status AcceptUntil(const RingLinks::Key& want, bool watch_ring = false);
  Status AwaitPoint(int fd);
  // InterruptOn's question, asked when poll saw `revents` on its fd; clears
  // `*watch` when the agent's link is gone (it would wake every poll).
  bool AgentEnded(short revents, bool* watch);
  void SendLoop();
  double Deadline() const;

  c10d::Store* store_;  // nullptr: a RingPlan's ring
  const int rank_, world_;
  const double timeout_s_;
  RingLinks& links_;
  uint64_t nonce_ = 0;
  // This rank's view of the layout: the plan's, or RingLayout::Default's.
  std::optional<RankRing> view_;
  std::string pred_, succ_;  // on its group's ring (the ring of all, when flat)
  std::map<int, std::pair<std::string, std::string>> cross_;  // part -> its ring's pred, succ
  std::set<std::string> peers_;  // every ring-channel neighbour: linked, told of a failure
  std::set<std::string> dials_;  // those it dials when their link is new
  int64_t next_tag_ = 0;     // collectives' frames are numbered in order
  bool failed_ = false;
  std::map<int, std::string> identities_;
  torch::Tensor scratch_;  // where a collective's incoming chunk lands

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::tuple<int, int, torch::Tensor>> queue_;  // dst, tag, tensor
  bool busy_ = false;
  std::atomic<bool> stopping_{false};
  Status send_status_;
  std::thread sender_;
};

}  // namespace bulwark::trainer
