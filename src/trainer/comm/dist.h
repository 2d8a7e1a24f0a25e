// Data-parallel communication: the torchrun environment contract and the few
// collectives the trainer uses, over c10d's ProcessGroupGloo and a TCPStore.
//
// Every collective returns a Status. A peer that died shows up as
// "Connection closed/reset by peer" within about a second; one that hangs,
// as a timeout after --dist-timeout. Both come back as kUnavailable so the
// trainer can wait in place for the next generation (under an agent) or end
// with its distinct exit code, instead of hanging. A Comm serves one
// generation; the next one connects a new Comm.
//
// Connect's rendezvous: ranks other than 0 connect to the store only once it
// listens (see dist.cc for the second that saves).
//
// Given RingLinks, a Comm's collectives and point-to-point messages go
// over a ring whose links outlive the generation (ring.h) instead of
// Gloo's full mesh: what elastic data parallelism's survivors regroup on.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "common/ring_layout.h"
#include "common/status.h"

namespace c10d {
class ProcessGroupGloo;
class TCPStore;
class Store;
class Work;
}  // namespace c10d

namespace bulwark::trainer {

class Ring;
class RingLinks;

// The torchrun variables. All absent: a single process (rank 0 of 1).
struct DistEnv {
  int rank = 0, world_size = 1, local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
};
// Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; some but not
// all set, or values out of range, is an error naming the variable.
Result<DistEnv> ReadDistEnv();

class Comm {
 public:
  // Rendezvous at MASTER_ADDR:MASTER_PORT (rank 0 hosts the store). For a
  // world of one, no sockets are opened and every collective is a no-op.
  // MASTER_PORT=0 (rank 0 only): the store binds a port the kernel picks and
  // rank 0 prints {"event":"rendezvous","port":N} on stdout before waiting
  // for the others, which a launcher then starts with MASTER_PORT=N.
  static Result<std::unique_ptr<Comm>> Connect(const DistEnv& env, double timeout_s, RingLinks* ring = nullptr);
  // A generation over `ring` with no store at all: the plan (common/ring_layout.h's
  // RingPlan) names the nonce and the addresses this rank links to. Its
  // collectives are the ring's; it has no subgroups, and no point-to-point
  // messages but to the ranks the plan names.
  static Result<std::unique_ptr<Comm>> Join(const DistEnv& env, const RingPlan& plan, double timeout_s,
                                            RingLinks& ring);
  ~Comm();

  int rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }

  // Sums each tensor across ranks in place. Tensors are sent together and
  // waited for together, so several buckets are in flight at once.
  Status AllReduceSum(std::vector<torch::Tensor>& tensors);
  // The element-wise maximum, the same way.
  Status AllReduceMax(std::vector<torch::Tensor>& tensors);
  // Rank r's chunk of `flat` (ChunkOf(numel, world_size, r)) is gathered to all.
  Status AllGatherChunks(torch::Tensor& flat);
  Status Broadcast(torch::Tensor& t, int root);
  Status Barrier();
  // Test hook for `bulwark inject hang --where collective`: waits for a
  // point-to-point message from the next rank that is never sent, inside
  // Gloo like a collective whose peer went quiet, until --dist-timeout.
  Status RecvNeverSent();

  // Over a ring (ring.h) rather than Gloo.
  bool on_ring() const { return ring_ != nullptr; }

  // From here on, sums of CUDA tensors (the gradient buckets) go over an
  // NCCL communicator on cuda:`device_index` (comm/nccl_group.h): peer loss
  // and timeouts come back as kUnavailable like Gloo's. Everything else
  // stays on Gloo. Collective: every rank of a Connect()ed world calls it;
  // rank 0's NCCL id travels through the generation's store. A build
  // without BULWARK_NCCL says so (kFailedPrecondition).
  Status UseNccl(int device_index);
  bool on_nccl() const { return nccl_ != nullptr; }

  // A process group of some ranks of this world, such as one pipeline
  // stage's data-parallel replicas. Only its members call it (each group's
  // rendezvous lives under its own `name` in the shared store); `ranks` lists
  // world ranks in group order and must contain this rank. On a ring, the
  // group is a ring of its own over `links` (a listener other than the
  // world's: ring.h), which the caller keeps between generations.
  // A generation joined from a plan (no store) forms the group's ring from
  // `plan`, cut for the group's own ranks (0..size-1).
  Result<std::unique_ptr<Comm>> Subgroup(const std::string& name, const std::vector<int>& ranks, double timeout_s,
                                         RingLinks* links = nullptr, const RingPlan* plan = nullptr);

  // Point-to-point, for pipeline stages. Send starts sending `t` (kept alive
  // until WaitSends) to world rank `dst`; Recv fills `t` from `src` and
  // blocks. Messages between two ranks are matched by `tag`. A peer that
  // died or hangs fails them like a collective (kUnavailable).
  Status Send(const torch::Tensor& t, int dst, int tag);
  Status Recv(torch::Tensor& t, int src, int tag);
  Status WaitSends();

 private:
  Comm() = default;
  Status Fail(const std::string& op, const std::exception& e);
  Status AllReduce(std::vector<torch::Tensor>& tensors, bool max);
  Status NcclAllReduce(std::vector<torch::Tensor>& tensors);
  DistEnv env_;
  double timeout_s_ = 60;  // --dist-timeout, for the NCCL group's waits
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
  std::vector<c10::intrusive_ptr<c10d::Work>> sends_;
  std::vector<std::vector<torch::Tensor>> send_tensors_;
  std::unique_ptr<Ring> ring_;  // after store_: it uses the store, so it goes first
  struct Nccl;                  // the NCCL group, where built with it
  std::unique_ptr<Nccl> nccl_;  // last: it closes first, while Gloo still stands
};

}  // namespace bulwark::trainer
