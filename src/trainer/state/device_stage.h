// DeviceStage: how a GPU rank's in-memory checkpoint leaves the device.
//
// The shard client copies host memory into the agent's shared region on a
// thread of its own (rank_client/shard_client.h). A GPU rank's parameters
// and moments live on the device, so each save first copies the rank's
// slices into pinned host memory: Begin() queues those copies on a CUDA
// stream of their own, ordered after the optimizer step on the compute
// stream, and returns at once; Wait(), which the shard client runs on its
// copying thread before it reads the host memory, returns when they are
// done. The rank never waits for the device copy itself, and the GPU goes on
// with the next forward while its copy engine drains the state. The next
// Begin() comes only after the client's WaitCopied(), so one pinned buffer
// per slice is enough: no copy is ever overwritten while it is being read.
//
// Built against a libtorch without c10's CUDA headers (the stand-in of
// docs/gpu.md), or with -DBULWARK_CUDA_ASYNC_COPY=OFF, Begin() copies
// synchronously: correct, and slower.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "common/status.h"

namespace bulwark::trainer {

class DeviceStage {
 public:
  explicit DeviceStage(torch::Device device);
  ~DeviceStage();
  DeviceStage(const DeviceStage&) = delete;
  DeviceStage& operator=(const DeviceStage&) = delete;

  // Queues host(i) = sources[i] for each 1-D float32 device tensor; the host
  // tensors are allocated (pinned) on first use and keep their sizes.
  void Begin(const std::vector<torch::Tensor>& sources);
  // Returns once the copies Begin() queued are done; any thread.
  Status Wait();
  const torch::Tensor& host(size_t i) const { return host_[i]; }
  // True when copies run on a stream of their own.
  static bool Async();

 private:
  struct Streams;  // the CUDA stream and events, where built with them
  torch::Device device_;
  std::vector<torch::Tensor> host_;
  std::unique_ptr<Streams> streams_;
};

}  // namespace bulwark::trainer
