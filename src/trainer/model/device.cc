#include "trainer/model/device.h"

namespace bulwark::trainer {

bool BuiltWithCuda() {
#ifdef BULWARK_CUDA
  return true;
#else
  return false;
#endif
}

Result<DeviceChoice> ChooseDevice(const std::string& requested, bool built_with_cuda, int gpus) {
  const std::string seen = std::to_string(gpus) + " GPU" + (gpus == 1 ? "" : "s") + " visible";
  if (requested == "cpu") return DeviceChoice{false, "cpu (--device cpu)"};
  if (requested == "cuda") {
    if (!built_with_cuda) {
      return Status::InvalidArgument(
          "--device cuda: this bulwark-train was built against a libtorch without CUDA (CMake found no CUDA in "
          "Torch, so BULWARK_CUDA is off); rebuild with a CUDA libtorch (scripts/gpu-build.sh) or use --device cpu");
    }
    if (gpus <= 0) {
      return Status::InvalidArgument(
          "--device cuda: this bulwark-train has CUDA but sees no GPU (libtorch counts 0 CUDA devices: no driver, "
          "or CUDA_VISIBLE_DEVICES hides them; nvidia-smi shows what the machine has); use --device cpu or auto");
    }
    return DeviceChoice{true, "cuda (--device cuda; " + seen + ")"};
  }
  if (requested != "auto") {
    return Status::InvalidArgument("--device '" + requested + "' is not one of: auto, cpu, cuda");
  }
  if (!built_with_cuda) return DeviceChoice{false, "cpu (auto: this build has no CUDA)"};
  if (gpus <= 0) return DeviceChoice{false, "cpu (auto: built with CUDA, but no GPU visible)"};
  return DeviceChoice{true, "cuda (auto: " + seen + ")"};
}

}  // namespace bulwark::trainer
