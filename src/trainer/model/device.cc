#include "trainer/model/device.h"

namespace bulwark::trainer {

bool BuiltWithCuda() {
#ifdef BULWARK_CUDA
  return true;
#else
  return false;
#endif
}

bool BuiltWithNccl() {
#ifdef BULWARK_NCCL
  return true;
#else
  return false;
#endif
}

Result<BackendChoice> ChooseNccl(const std::string& requested, const NcclFacts& f) {
  if (requested == "gloo") return BackendChoice{false, "gloo (--dist-backend gloo)"};
  if (requested != "auto" && requested != "nccl") {
    return Status::InvalidArgument("--dist-backend '" + requested + "' is not one of: auto, gloo, nccl");
  }
  const std::string how = requested == "nccl" ? "--dist-backend nccl" : "auto";
  // Why NCCL cannot serve, or empty.
  std::string why;
  if (!f.cuda) {
    why = "the rank trains on the CPU (NCCL reduces GPU memory; use --device cuda)";
  } else if (!f.built_with_nccl) {
    why = "this bulwark-train was built without NCCL (a CUDA build links it where NCCL >= 2.28 is found: "
          "src/trainer/CMakeLists.txt, NCCL_HOME)";
  } else if (f.local_world_size > f.gpus && !(requested == "nccl" && f.gpus == 1)) {
    why = std::to_string(f.local_world_size) + " ranks share " + std::to_string(f.gpus) + " GPU" +
          (f.gpus == 1 ? "" : "s") + " on this machine, and NCCL takes one GPU per rank" +
          (f.gpus == 1 ? " (when each rank sees a GPU of its own, CUDA_VISIBLE_DEVICES per rank, say --dist-backend nccl)"
                       : "");
  } else if (f.elastic) {
    why = "elastic replicas reduce exactly over their ring";
  }
  if (!why.empty()) {
    if (requested == "nccl") return Status::InvalidArgument("--dist-backend nccl: " + why + "; use gloo or auto");
    return BackendChoice{false, "gloo (auto: " + why + ")"};
  }
  if (f.world_size == 1) return BackendChoice{false, "gloo (" + how + ": one rank, nothing to reduce)"};
  if (f.local_world_size > f.gpus) {
    // Only asked for, and only with one GPU visible: the user says each
    // rank's is its own. NCCL refuses at init if that is wrong.
    return BackendChoice{true, "nccl (--dist-backend nccl: each of this machine's " +
                                   std::to_string(f.local_world_size) + " ranks sees one GPU, taken as its own)"};
  }
  return BackendChoice{true, "nccl (" + how + ": a GPU per rank, " + std::to_string(f.local_world_size) +
                                 " on this machine's " + std::to_string(f.gpus) + ")"};
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
