#include "trainer/model/device_setup.h"

#include <torch/torch.h>

#include <cstdlib>

namespace bulwark::trainer {

Result<DeviceChoice> ResolveDevice(const TrainConfig& cfg, int* gpus) {
  *gpus = 0;
#ifdef BULWARK_CUDA
  *gpus = static_cast<int>(torch::cuda::device_count());
#endif
  return ChooseDevice(cfg.device, BuiltWithCuda(), *gpus);
}

torch::Device RankGpu(int gpus) {
  const char* local_rank = std::getenv("LOCAL_RANK");
  const int local = local_rank != nullptr ? std::atoi(local_rank) : 0;
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(gpus > 0 ? local % gpus : 0));
}

void MakeCudaDeterministic() {
#ifdef BULWARK_CUDA
  ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
#endif
}

}  // namespace bulwark::trainer
