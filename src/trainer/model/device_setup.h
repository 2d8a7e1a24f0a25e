// What a process does to run where --device chose: libtorch's facts and
// settings, beside device.h's pure choice (which builds without libtorch).
#pragma once

#include <torch/torch.h>

#include "common/status.h"
#include "trainer/config.h"
#include "trainer/model/device.h"

namespace bulwark::trainer {

// --device against this build and machine; `gpus`: the CUDA devices
// libtorch sees (0 on a CPU-only build).
Result<DeviceChoice> ResolveDevice(const TrainConfig& cfg, int* gpus);

// The GPU a rank takes: the machine's ranks take its `gpus` in turn by
// LOCAL_RANK (one GPU: they share it).
torch::Device RankGpu(int gpus);

// From here on, CUDA kernels that repeat bit for bit: deterministic
// algorithms only (an op without one throws, naming itself; attention takes
// the explicit path, kernels_eager.cc) and cuBLAS's fixed workspace, which
// cuBLAS reads when it makes its first handle, so call this before any CUDA
// work. Does nothing on a CPU-only build.
void MakeCudaDeterministic();

}  // namespace bulwark::trainer
