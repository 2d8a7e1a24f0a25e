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

// What ChooseNccl weighs: the build's facts, the machine's and the job's.
struct NcclFacts {
  bool built_with_nccl = false;     // BULWARK_NCCL (src/trainer/CMakeLists.txt)
  bool cuda = false;                // the rank trains on a GPU
  int world_size = 1;
  int local_world_size = 1;         // ranks on this machine (LOCAL_WORLD_SIZE)
  int gpus = 0;                     // GPUs the machine's ranks see
  bool elastic = false;             // --elastic-replicas: its exact reduction runs on its ring
};
struct BackendChoice {
  bool nccl = false;
  std::string reason;  // "nccl (auto: a GPU per rank, 8 ranks on 8 GPUs)", "gloo (auto: 2 ranks share 1 GPU)", ...
};

// --dist-backend (auto, gloo, nccl): what reduces a CUDA rank's gradients.
// NCCL needs a GPU per rank (it refuses two ranks on one device), and
// serves the data-parallel reduction of a plain job and of a fixed
// pipeline's stage replicas; an elastic job reduces exactly over its ring. auto takes NCCL wherever it applies; nccl where it cannot is a
// one-line error naming why. Ranks that each see one GPU cannot tell
// whether it is the same one (a shared GPU) or their own (CUDA_VISIBLE_DEVICES
// per rank, as Slurm's --gpus-per-task sets): auto takes Gloo, nccl NCCL.
Result<BackendChoice> ChooseNccl(const std::string& requested, const NcclFacts& f);

// True when this binary was compiled with BULWARK_NCCL.
bool BuiltWithNccl();

}  // namespace bulwark::trainer
