#include "trainer/state/device_stage.h"

// The asynchronous path needs the CUDA headers of a CUDA libtorch; the CPU
// stand-in build that CI runs has none (docs/gpu.md).
#if defined(BULWARK_CUDA) && defined(BULWARK_CUDA_ASYNC_COPY) && __has_include(<c10/cuda/CUDAStream.h>) && \
    __has_include(<cuda_runtime_api.h>)
#define BULWARK_STAGE_ASYNC 1
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
// The event moved from ATen to c10 in later libtorch; same methods.
#if __has_include(<c10/cuda/CUDAEvent.h>)
#include <c10/cuda/CUDAEvent.h>
using StageEvent = c10::cuda::CUDAEvent;
#else
#include <ATen/cuda/CUDAEvent.h>
using StageEvent = at::cuda::CUDAEvent;
#endif
#endif

#include <exception>
#include <string>

namespace bulwark::trainer {

#ifdef BULWARK_STAGE_ASYNC
struct DeviceStage::Streams {
  explicit Streams(c10::DeviceIndex index) : copy(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index)) {}
  c10::cuda::CUDAStream copy;
  StageEvent updated;  // recorded on the compute stream at each Begin (one event, re-recorded)
  StageEvent done;     // recorded on `copy` after the last queued copy
};
bool DeviceStage::Async() { return true; }
#else
struct DeviceStage::Streams {};
bool DeviceStage::Async() { return false; }
#endif

DeviceStage::DeviceStage(torch::Device device) : device_(device) {
#ifdef BULWARK_STAGE_ASYNC
  streams_ = std::make_unique<Streams>(device.index());
#endif
}

DeviceStage::~DeviceStage() { Wait().IgnoreError(); }

void DeviceStage::Begin(const std::vector<torch::Tensor>& sources) {
  torch::NoGradGuard no_grad;
  if (host_.empty()) {
    for (const auto& s : sources) {
      host_.push_back(torch::empty({s.numel()}, torch::TensorOptions().dtype(s.dtype()).pinned_memory(true)));
    }
  }
  TORCH_CHECK(host_.size() == sources.size(), "DeviceStage: ", sources.size(), " sources, staged ", host_.size());
#ifdef BULWARK_STAGE_ASYNC
  // After everything queued so far on the compute stream (the update), and
  // before nothing queued later: the next update comes after WaitCopied().
  streams_->updated.record(c10::cuda::getCurrentCUDAStream(device_.index()));
  streams_->updated.block(streams_->copy);
  {
    c10::cuda::CUDAStreamGuard on_copy(streams_->copy);
    for (size_t i = 0; i < sources.size(); ++i) host_[i].copy_(sources[i], /*non_blocking=*/true);
  }
  streams_->done.record(streams_->copy);
#else
  for (size_t i = 0; i < sources.size(); ++i) host_[i].copy_(sources[i]);
#endif
}

Status DeviceStage::Wait() {
#ifdef BULWARK_STAGE_ASYNC
  try {
    streams_->done.synchronize();
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (auto nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
    return Status::Internal("the device-to-host copy of the checkpoint failed: " + what);
  }
#endif
  return Status::OK();
}

}  // namespace bulwark::trainer
