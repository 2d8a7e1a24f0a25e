// An NCCL communicator for the gradient all-reduce of CUDA ranks that each
// have a GPU of their own. NCCL refuses two ranks on one device, so ranks
// that share a GPU stay on Gloo (dist.h).
//
// Nothing here may hang on a lost peer: NCCL's own calls block until every
// peer answers. The communicator is therefore non-blocking (ncclConfig_t
// blocking = 0): init, the all-reduce and shrink return at once,
// and this file polls their state against a deadline. A peer that died or
// went quiet comes back as kUnavailable, as dist.h's Gloo collectives do, so
// that the trainer waits in place for the next generation. The group is then
// unusable; its survivors may Shrink it (NCCL >= 2.28) instead of a new
// rendezvous, or drop it and rendezvous again.
//
// The header names no NCCL or CUDA type, so its callers need neither's
// headers: the stream is a cudaStream_t passed as void* (under BULWARK_CUDA
// the caller takes c10's current stream). at::Tensor is torch::Tensor.
//
// One thread uses a group at a time.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

struct ncclComm;  // nccl.h's ncclComm_t is ncclComm*

namespace bulwark::trainer {

// --- The pure parts (nccl_group_checks.cc): no GPU needed, unit-tested on
// the CPU host (tests/unit/nccl_group_test.cc) ---

// What one look at an asynchronous operation found.
enum class PollState { kPending, kDone, kFailed };

// WaitFor's time, injectable so a test runs the deadline logic without a
// GPU and without sleeping.
struct PollClock {
  std::function<double()> now_s;  // monotonic, in seconds
  std::function<void()> pause;    // between two polls
  // steady_clock and a 100 µs sleep: short beside a step's all-reduce
  // (milliseconds), long enough not to keep a core busy.
  static PollClock Steady();
};

// Polls until `poll` says kDone (OK) or kFailed, or `timeout_s` have passed
// since the first poll. The operation is polled at least once, so a finished
// one is seen even with a zero timeout. Fails with kUnavailable, one line:
// "<what>: <the text poll put in *failure>" or "<what>: timed out after N s".
Status WaitFor(const std::string& what, const std::function<PollState(std::string* failure)>& poll,
               double timeout_s, const PollClock& clock = PollClock::Steady());

// The ncclDataType_t NCCL sums `dtype` as (float32, bfloat16, float64,
// int64), or -1: the trainer reduces no other type.
int NcclDataTypeFor(at::ScalarType dtype);

// The all-reduce's preconditions, checked before anything is enqueued: each
// tensor defined, of a dtype above, a contiguous CUDA tensor on
// cuda:`device_index`. A violation is kInvalidArgument naming the tensor's
// index and what is wrong ("tensor 1 has dtype Int; NCCL sums Float, ...").
Status CheckAllReduceTensors(const std::vector<at::Tensor>& tensors, int device_index);

// Shrink's precondition: each excluded rank in the group, named once, and
// not `rank` (the excluded ranks do not call Shrink). kInvalidArgument.
Status CheckShrinkExcluded(const std::vector<int>& excluded, int rank, int size);

// One line for an NCCL result (an ncclResult_t) that `call` returned or a
// communicator reported, with what NCCL last said (ncclGetLastError, put on
// one line): "[peer lost (remote error): ]<call>: <ncclGetErrorString>[;
// <last_error>]". The prefix names the likely cause for remote, system and
// CUDA errors.
std::string DescribeNccl(const std::string& call, int nccl_result, const std::string& last_error = "");

// "<context>: <DescribeNccl>" with the code the trainer acts on: a lost
// peer, the network or the device (remote, system, CUDA errors) is
// kUnavailable, so that it waits for the next generation; a wrong argument
// is kInvalidArgument; the rest (misuse, NCCL's internal errors) kInternal.
Status NcclError(const std::string& context, const std::string& call, int nccl_result,
                 const std::string& last_error = "");

// --- The communicator (nccl_group.cc) ---

// The number of CUDA devices this process sees (>= 1), or kFailedPrecondition
// "no CUDA device visible (cudaGetDeviceCount: <the runtime's reason>)": on a
// host without a driver the runtime says "CUDA driver version is insufficient
// for CUDA runtime version". Not kUnavailable: waiting will not bring a GPU.
Result<int> VisibleCudaDevices();

class NcclGroup {
 public:
  // Gives rank 0's ncclUniqueId bytes to the store and returns them to every
  // rank: rank 0 passes its id, the others an empty string. The store must
  // be the generation's own (Comm's is: rank 0 hosts a new one each
  // generation), so that no rank reads an earlier generation's id.
  using ExchangeId = std::function<Result<std::string>(const std::string& mine)>;

  // Joins `world` ranks on cuda:`device_index`, which becomes the calling
  // thread's current device (NCCL binds to it). Rank 0 makes the id, and
  // `exchange_id` carries it (not called for a world of one, which needs no
  // store). Errors: the arguments (kInvalidArgument), no GPU
  // (kFailedPrecondition, before the id is exchanged), the exchange's own
  // status, and a peer that never arrives: kUnavailable after `timeout_s`,
  // the half-made communicator aborted.
  static Result<std::unique_ptr<NcclGroup>> Create(int rank, int world, int device_index,
                                                   const ExchangeId& exchange_id, double timeout_s);

  // Destroys the communicator by ncclCommAbort (nccl_group.cc's Close says
  // why not a finalize): never waits on a peer.
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  // Sums each tensor across the group in place, all of them in one NCCL
  // group call on `cuda_stream` (a cudaStream_t; nullptr is the legacy
  // default stream), and waits until the stream has finished them. The
  // deadline (`timeout_s`) counts the work queued on the stream before them
  // too. A lost peer, an NCCL or CUDA error or the deadline: the
  // communicator is revoked (its kernels stopped, so the stream drains) or
  // aborted, the group becomes unusable, and the result is kUnavailable:
  // "NCCL all-reduce: peer lost (remote error): ..." or "NCCL all-reduce:
  // timed out after N s" (a call NCCL refuses as misused keeps NcclError's
  // code). On an unusable group: kUnavailable at once. Bad tensors:
  // kInvalidArgument, nothing enqueued, the group still usable.
  Status AllReduceSum(const std::vector<at::Tensor>& tensors, void* cuda_stream);

  // The survivors' smaller group: every rank but `excluded_ranks` (this
  // group's numbering) calls it, the excluded ones must not. Ranks are
  // renumbered as NCCL does (in order, closing the gaps). After a failure the
  // parent's in-flight work is aborted first (NCCL_SHRINK_ABORT). The same
  // deadline as Create; this group is left as it was (destroy it after).
  // kUnavailable if it was aborted (a new rendezvous is needed then).
  Result<std::unique_ptr<NcclGroup>> Shrink(const std::vector<int>& excluded_ranks);

  // Aborts the communicator now (ncclCommAbort: stops its kernels, frees it,
  // returns without waiting on peers). The group is unusable after.
  void Abort();

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool usable() const { return comm_ != nullptr && failure_.empty(); }

 private:
  NcclGroup(ncclComm* comm, int rank, int size, int device_index, double timeout_s);
  // Marks the group unusable for `why`, revokes the communicator (aborts it
  // when the revoke does not settle), and returns `why`: kUnavailable for a
  // lost peer or the deadline, its own code for a refused call.
  Status Fail(const Status& why);
  // ncclCommRevoke and a bounded wait for it to settle; false if it did not.
  bool Revoke();
  // Frees the communicator without waiting on any peer.
  void Close();

  ncclComm* comm_;  // null once aborted or closed
  int rank_, size_, device_index_;
  double timeout_s_;
  std::string failure_;  // why the group is unusable; empty while it is usable
};

}  // namespace bulwark::trainer
