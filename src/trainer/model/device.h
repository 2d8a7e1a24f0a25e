// --device: where a rank's parameters, optimizer state, batches and step run.
//
// auto takes CUDA when this bulwark-train was built against a CUDA libtorch
// (CMake defines BULWARK_CUDA, src/trainer/CMakeLists.txt) and a GPU is
// visible, else the CPU. The choice is pure (tests pass the build's and the
// machine's facts); train.cc asks libtorch for them. docs/gpu.md says what a
// CUDA rank runs: every layout and optimizer a CPU rank runs.
#pragma once

#include <string>

#include "common/status.h"
#include "trainer/config.h"

namespace bulwark::trainer {

struct DeviceChoice {
  bool cuda = false;
  std::string reason;  // "cpu (auto: this build has no CUDA)", "cuda (--device cuda; 1 GPU visible)", ...
};

// `requested` is auto, cpu or cuda; `built_with_cuda`: BULWARK_CUDA;
// `gpus`: the CUDA devices libtorch sees. --device cuda on a CPU-only
// build, or with no GPU visible, is a one-line error naming the reason.
Result<DeviceChoice> ChooseDevice(const std::string& requested, bool built_with_cuda, int gpus);

// True when this binary was compiled with BULWARK_CUDA.
bool BuiltWithCuda();

}  // namespace bulwark::trainer
