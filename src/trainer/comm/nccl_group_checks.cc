// The NCCL group's pure parts: the deadline loop, the dtype map, the
// preconditions and the one-line errors. They need nccl.h's constants and
// strings but no GPU, so the CPU host tests them (nccl_group.h).
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <thread>

#include "trainer/comm/nccl_group.h"

namespace bulwark::trainer {
namespace {

std::string Seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", s);
  return text;
}

// NCCL's texts end up in the trainer's one-line errors and events.
std::string OneLine(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  while (!s.empty() && s.back() == ' ') s.pop_back();
  if (s.size() > 300) s = s.substr(0, 297) + "...";
  return s;
}

}  // namespace

PollClock PollClock::Steady() {
  return {[] { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); },
          [] { std::this_thread::sleep_for(std::chrono::microseconds(100)); }};
}

Status WaitFor(const std::string& what, const std::function<PollState(std::string* failure)>& poll,
               double timeout_s, const PollClock& clock) {
  const double start = clock.now_s();
  for (;;) {
    std::string failure;
    const PollState state = poll(&failure);
    if (state == PollState::kDone) return Status::OK();
    if (state == PollState::kFailed) return Status::Unavailable(what + ": " + failure);
    if (clock.now_s() - start >= timeout_s) {
      return Status::Unavailable(what + ": timed out after " + Seconds(timeout_s) + " s");
    }
    clock.pause();
  }
}

int NcclDataTypeFor(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return ncclFloat32;
    case at::kBFloat16: return ncclBfloat16;
    case at::kDouble: return ncclFloat64;
    case at::kLong: return ncclInt64;
    default: return -1;
  }
}

Status CheckAllReduceTensors(const std::vector<at::Tensor>& tensors, int device_index) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    const std::string which = "NCCL all-reduce: tensor " + std::to_string(i);
    if (!t.defined()) return Status::InvalidArgument(which + " is undefined");
    if (NcclDataTypeFor(t.scalar_type()) < 0) {
      return Status::InvalidArgument(which + " has dtype " + c10::toString(t.scalar_type()) +
                                     "; NCCL sums Float, BFloat16, Double and Long here");
    }
    if (!t.is_cuda()) return Status::InvalidArgument(which + " is on " + t.device().str() + ", not a CUDA device");
    if (t.device().index() != device_index) {
      return Status::InvalidArgument(which + " is on " + t.device().str() + "; the group's GPU is cuda:" +
                                     std::to_string(device_index));
    }
    if (!t.is_contiguous()) return Status::InvalidArgument(which + " is not contiguous (NCCL sums it in place)");
  }
  return Status::OK();
}

Status CheckShrinkExcluded(const std::vector<int>& excluded, int rank, int size) {
  for (int r : excluded) {
    const std::string which = "NCCL shrink: excluded rank " + std::to_string(r);
    if (r < 0 || r >= size) return Status::InvalidArgument(which + " is not in a group of " + std::to_string(size));
    if (r == rank) return Status::InvalidArgument(which + " is this rank; only the survivors shrink");
  }
  if (std::set<int>(excluded.begin(), excluded.end()).size() != excluded.size()) {
    return Status::InvalidArgument("NCCL shrink: an excluded rank is named twice");
  }
  return Status::OK();
}

std::string DescribeNccl(const std::string& call, int nccl_result, const std::string& last_error) {
  std::string what;
  if (nccl_result == ncclRemoteError) what = "peer lost (remote error): ";
  if (nccl_result == ncclSystemError) what = "peer lost or network down (system error): ";
  if (nccl_result == ncclUnhandledCudaError) what = "CUDA error: ";
  what += call + ": " + ncclGetErrorString(static_cast<ncclResult_t>(nccl_result));
  return OneLine(last_error.empty() ? what : what + "; " + last_error);
}

Status NcclError(const std::string& context, const std::string& call, int nccl_result, const std::string& last_error) {
  const std::string message = context + ": " + DescribeNccl(call, nccl_result, last_error);
  switch (nccl_result) {
    case ncclRemoteError:
    case ncclSystemError:
    case ncclUnhandledCudaError: return Status::Unavailable(message);
    case ncclInvalidArgument: return Status::InvalidArgument(message);
    default: return Status::Internal(message);
  }
}

}  // namespace bulwark::trainer
