// One real NVML read, for a GPU machine: loads NVML exactly as the agent
// does (BULWARK_NVML_LIB or libnvidia-ml.so.1), prints how long loading
// and one full read took, the GPU count, the verdict the device check
// would report, the slowdown hint, and any Xid that arrives while it
// watches. Exit 0 when NVML loaded, 1 when it did not (the agent's one
// warning is printed). Usage: nvml_probe [WATCH_SECONDS]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "agent/gpu_health.h"

int main(int argc, char** argv) {
  using namespace bulwark::agent;
  using Clock = std::chrono::steady_clock;
  const double watch_s = argc > 1 ? std::atof(argv[1]) : 5;
  auto log = [](const std::string& line) { std::printf("agent: %s\n", line.c_str()); };
  const auto t0 = Clock::now();
  std::unique_ptr<GpuHealth> gpu = GpuHealth::Open(Nvml::LibraryPath(), log);
  const auto t1 = Clock::now();
  if (!gpu) return 1;
  GpuVerdict v = gpu->Read();
  const auto t2 = Clock::now();
  auto ms = [](Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  std::printf("load + init + baseline %.1f ms; one read of %u GPU(s) %.2f ms\n", ms(t1 - t0), gpu->nvml().gpus(),
              ms(t2 - t1));
  std::printf("device: %s%s\nslowdown: %s\n", v.ok ? "ok" : "FAILED: ", v.detail.c_str(),
              v.slowdown.empty() ? "none" : v.slowdown.c_str());
  // Xids arrive on the reader's thread and are logged there.
  const auto end = Clock::now() + std::chrono::milliseconds(static_cast<int>(watch_s * 1000));
  while (Clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  v = gpu->Read();
  std::printf("after %.0f s: device %s%s\n", watch_s, v.ok ? "ok" : "FAILED: ", v.detail.c_str());
  return 0;
}
