// NcclGroup: init, all-reduce, shrink and close of a non-blocking NCCL
// communicator, each polled against a deadline (nccl_group.h says why). The
// pure parts it uses are in nccl_group_checks.cc.
#include "trainer/comm/nccl_group.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>

// CMake checks it too (src/trainer/CMakeLists.txt); this names it for any other build.
#if NCCL_VERSION_CODE < NCCL_VERSION(2, 28, 0)
#error "comm/nccl_group.cc needs NCCL >= 2.28 (ncclCommRevoke, ncclCommShrink's abort flag)"
#endif

namespace bulwark::trainer {
namespace {

// A revoke settles in milliseconds; longer means they wait on a
// peer that is gone, and aborting is the way out.
constexpr double kSettleBoundS = 10.0;

std::string LastError(ncclComm_t comm) {
  const char* text = ncclGetLastError(comm);
  return text == nullptr ? "" : text;
}

// A non-blocking call that was accepted: done, or going on in the background.
bool Started(ncclResult_t r) { return r == ncclSuccess || r == ncclInProgress; }

// A communicator's state as a poll: in progress, settled, or failed.
PollState CommState(ncclComm_t comm, std::string* failure) {
  ncclResult_t state = ncclSuccess;
  const ncclResult_t asked = ncclCommGetAsyncError(comm, &state);
  if (asked != ncclSuccess) state = asked;
  if (state == ncclInProgress) return PollState::kPending;
  if (state == ncclSuccess) return PollState::kDone;
  *failure = DescribeNccl("ncclCommGetAsyncError", state, LastError(comm));
  return PollState::kFailed;
}

// Settled is anything but in progress: after a revoke the state may stay
// the error that caused it.
PollState Settled(ncclComm_t comm) {
  ncclResult_t state = ncclSuccess;
  const bool asked = ncclCommGetAsyncError(comm, &state) == ncclSuccess;
  return asked && state == ncclInProgress ? PollState::kPending : PollState::kDone;
}

// The all-reduce is done when NCCL has enqueued it (a non-blocking
// communicator may still be launching) and the stream has run it.
PollState AllReduceState(ncclComm_t comm, cudaStream_t stream, std::string* failure) {
  const PollState nccl = CommState(comm, failure);
  if (nccl != PollState::kDone) return nccl;
  const cudaError_t e = cudaStreamQuery(stream);
  if (e == cudaSuccess) return PollState::kDone;
  if (e == cudaErrorNotReady) return PollState::kPending;
  *failure = std::string("CUDA error: cudaStreamQuery: ") + cudaGetErrorString(e);
  return PollState::kFailed;
}

ncclConfig_t NonBlockingConfig() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

// Rank 0's id, through the caller's store unless the world is one rank.
Result<ncclUniqueId> AgreeOnId(int rank, int world, const NcclGroup::ExchangeId& exchange_id) {
  ncclUniqueId id;
  std::string mine;
  if (rank == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) return NcclError("NCCL init", "ncclGetUniqueId", r, LastError(nullptr));
    if (world == 1) return id;
    mine.assign(id.internal, sizeof id.internal);
  }
  Result<std::string> got = exchange_id(mine);
  if (!got.ok()) return got.status().Annotate("NCCL init: exchanging rank 0's unique id");
  if (got->size() != sizeof id.internal) {
    return Status::Internal("NCCL init: the exchanged unique id has " + std::to_string(got->size()) +
                            " bytes, not " + std::to_string(sizeof id.internal));
  }
  std::memcpy(id.internal, got->data(), sizeof id.internal);
  return id;
}

Status Unusable(const std::string& what, const std::string& failure) {
  return Status::Unavailable(what + ": the group is unusable after an earlier failure (" + failure +
                             "); the next generation forms a new one");
}

}  // namespace

Result<int> VisibleCudaDevices() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // clears the runtime's last error: it is reported here
    return Status::FailedPrecondition(std::string("no CUDA device visible (cudaGetDeviceCount: ") +
                                      cudaGetErrorString(e) + ")");
  }
  if (count <= 0) return Status::FailedPrecondition("no CUDA device visible (cudaGetDeviceCount: 0 devices)");
  return count;
}

Result<std::unique_ptr<NcclGroup>> NcclGroup::Create(int rank, int world, int device_index,
                                                     const ExchangeId& exchange_id, double timeout_s) {
  const std::string of = "rank " + std::to_string(rank) + " of " + std::to_string(world);
  if (world < 1 || rank < 0 || rank >= world) return Status::InvalidArgument("NCCL init: " + of + " is out of range");
  if (device_index < 0) return Status::InvalidArgument("NCCL init: the device index must be >= 0");
  if (!(timeout_s > 0)) return Status::InvalidArgument("NCCL init: the timeout must be positive");
  Result<int> gpus = VisibleCudaDevices();
  if (!gpus.ok()) return gpus.status().Annotate("NCCL init");
  if (device_index >= *gpus) {
    return Status::InvalidArgument("NCCL init: cuda:" + std::to_string(device_index) + " does not exist (" +
                                   std::to_string(*gpus) + " CUDA devices visible)");
  }
  // NCCL binds the communicator to the calling thread's current device.
  const cudaError_t e = cudaSetDevice(device_index);
  if (e != cudaSuccess) return Status::FailedPrecondition(std::string("NCCL init: cudaSetDevice: ") + cudaGetErrorString(e));
  Result<ncclUniqueId> id = AgreeOnId(rank, world, exchange_id);
  if (!id.ok()) return id.status();
  ncclConfig_t config = NonBlockingConfig();
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&comm, world, *id, rank, &config);
  if (!Started(r)) {
    Status failed = NcclError("NCCL init", "ncclCommInitRankConfig", r, LastError(comm));
    if (comm != nullptr) (void)ncclCommAbort(comm);  // frees what was made; its result changes nothing
    return failed;
  }
  Status ready = WaitFor("NCCL init (" + of + ")", [comm](std::string* f) { return CommState(comm, f); }, timeout_s);
  if (!ready.ok()) {
    (void)ncclCommAbort(comm);  // stops the init's thread waiting for the missing peer
    return ready;
  }
  return std::unique_ptr<NcclGroup>(new NcclGroup(comm, rank, world, device_index, timeout_s));
}

NcclGroup::NcclGroup(ncclComm* comm, int rank, int size, int device_index, double timeout_s)
    : comm_(comm), rank_(rank), size_(size), device_index_(device_index), timeout_s_(timeout_s) {}

NcclGroup::~NcclGroup() { Close(); }

Status NcclGroup::AllReduceSum(const std::vector<at::Tensor>& tensors, void* cuda_stream) {
  if (!usable()) return Unusable("NCCL all-reduce", failure_);
  BULWARK_RETURN_IF_ERROR(CheckAllReduceTensors(tensors, device_index_));
  if (tensors.empty()) return Status::OK();
  const auto stream = static_cast<cudaStream_t>(cuda_stream);
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) return Fail(NcclError("NCCL all-reduce", "ncclGroupStart", r, LastError(comm_)));
  ncclResult_t enqueued = ncclSuccess;
  for (const at::Tensor& t : tensors) {
    if (t.numel() == 0) continue;
    const auto type = static_cast<ncclDataType_t>(NcclDataTypeFor(t.scalar_type()));
    enqueued = ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), type, ncclSum, comm_, stream);
    if (!Started(enqueued)) break;
  }
  // Closed whatever happened inside: NCCL's group nesting is per thread.
  r = ncclGroupEnd();
  if (!Started(enqueued)) return Fail(NcclError("NCCL all-reduce", "ncclAllReduce", enqueued, LastError(comm_)));
  if (!Started(r)) return Fail(NcclError("NCCL all-reduce", "ncclGroupEnd", r, LastError(comm_)));
  ncclComm_t comm = comm_;
  Status done = WaitFor("NCCL all-reduce", [comm, stream](std::string* f) { return AllReduceState(comm, stream, f); },
                        timeout_s_);
  return done.ok() ? done : Fail(done);
}

Status NcclGroup::Fail(const Status& why) {
  failure_ = why.message();
  if (comm_ != nullptr && !Revoke()) Abort();
  return why;
}

bool NcclGroup::Revoke() {
  if (!Started(ncclCommRevoke(comm_, NCCL_REVOKE_DEFAULT))) return false;
  ncclComm_t comm = comm_;
  return WaitFor("NCCL revoke", [comm](std::string*) { return Settled(comm); }, std::min(timeout_s_, kSettleBoundS))
      .ok();
}

Result<std::unique_ptr<NcclGroup>> NcclGroup::Shrink(const std::vector<int>& excluded_ranks) {
  if (comm_ == nullptr) {
    return Status::Unavailable("NCCL shrink: the communicator was aborted (" + failure_ +
                               "); the survivors need a new rendezvous");
  }
  BULWARK_RETURN_IF_ERROR(CheckShrinkExcluded(excluded_ranks, rank_, size_));
  std::vector<int> excluded = excluded_ranks;  // ncclCommShrink takes a non-const int*
  ncclConfig_t config = NonBlockingConfig();
  // After a failure the parent's kernels may still wait on the lost peer.
  const int flags = usable() ? NCCL_SHRINK_DEFAULT : NCCL_SHRINK_ABORT;
  ncclComm_t child = nullptr;
  const ncclResult_t r =
      ncclCommShrink(comm_, excluded.data(), static_cast<int>(excluded.size()), &child, &config, flags);
  if (!Started(r) || child == nullptr) {
    Status failed = Started(r) ? Status::Internal("NCCL shrink: ncclCommShrink gave a survivor no communicator")
                               : NcclError("NCCL shrink", "ncclCommShrink", r, LastError(comm_));
    if (child != nullptr) (void)ncclCommAbort(child);  // frees what was made; its result changes nothing
    return failed;
  }
  // While NCCL builds the child both communicators are in progress. The
  // child's error fails the shrink; the parent's does not (it is left behind).
  ncclComm_t parent = comm_;
  const auto state = [parent, child](std::string* f) {
    const PollState made = CommState(child, f);
    return made != PollState::kDone ? made : Settled(parent);
  };
  Status ready = WaitFor("NCCL shrink", state, timeout_s_);
  int rank = -1, size = -1;  // as NCCL renumbered them
  if (ready.ok()) {
    ncclResult_t asked = ncclCommUserRank(child, &rank);
    if (asked == ncclSuccess) asked = ncclCommCount(child, &size);
    if (asked != ncclSuccess) ready = NcclError("NCCL shrink", "ncclCommUserRank/Count", asked, LastError(child));
  }
  if (!ready.ok()) {
    (void)ncclCommAbort(child);  // as above
    return ready;
  }
  return std::unique_ptr<NcclGroup>(new NcclGroup(child, rank, size, device_index_, timeout_s_));
}

void NcclGroup::Abort() {
  if (comm_ == nullptr) return;
  (void)ncclCommAbort(comm_);  // its result only says how cleanly it was freed; it is gone either way
  comm_ = nullptr;
  if (failure_.empty()) failure_ = "aborted";
}

void NcclGroup::Close() {
  // Aborted, never finalized: every all-reduce was waited for before it
  // returned, so there is nothing to flush, and a finalize waits on every
  // peer, one of which may be the reason this generation ends (up to the
  // settle bound at each restart). ncclCommAbort waits on no one.
  Abort();
}

}  // namespace bulwark::trainer
