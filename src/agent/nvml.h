// Nvml: the few NVML entry points the agent's device check needs, loaded
// at run time with dlopen.
//
// Why dlopen and our own declarations instead of nvml.h and -lnvidia-ml:
// the agent must build and run on machines without the NVIDIA driver (CI,
// every CPU-only host), where the emulated device stays in charge; a
// link-time dependency would make the agent unable to start there. The
// declarations follow NVML's documented C ABI (nvml.h of CUDA 11 and later:
// the _v2 entry points, nvmlEventData_t with its instance ids); nothing else
// of NVML is used.
//
// Which library: $BULWARK_NVML_LIB, else libnvidia-ml.so.1 (the driver's
// soname). Tests point the variable at tests/fake_nvml, which has the same
// entry points and injects faults from a file.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark::agent {

// NVML's return codes that the agent tells apart (nvmlReturn_t).
enum NvmlCode : int {
  kNvmlSuccess = 0,
  kNvmlNotSupported = 3,
  kNvmlTimeout = 10,
  kNvmlGpuIsLost = 15,
};

// Clock throttle (since CUDA 12.2: "clocks event") reason bits, nvml.h's
// nvmlClocksThrottleReason* values.
constexpr unsigned long long kThrottleSwPowerCap = 0x4;
constexpr unsigned long long kThrottleHwSlowdown = 0x8;
constexpr unsigned long long kThrottleSwThermal = 0x20;
constexpr unsigned long long kThrottleHwThermal = 0x40;
constexpr unsigned long long kThrottleHwPowerBrake = 0x80;

struct RemappedRows {
  unsigned corrected = 0, uncorrected = 0;
  bool pending = false;  // a remap waits for the next GPU reset
  bool failed = false;   // a row could not be remapped: the GPU needs service
};

// An Xid critical error that NVML's event set delivered.
struct XidEvent {
  unsigned gpu = 0;
  unsigned long long xid = 0;
};

// The NVML session: nvmlInit_v2 on Load, nvmlShutdown on destruction.
// Every call returns the NVML code (kNvmlSuccess, kNvmlGpuIsLost, ...);
// Describe turns one into NVML's own words. Thread-safe as NVML is; the
// event set belongs to the one thread that waits on it.
class Nvml {
 public:
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  // $BULWARK_NVML_LIB or libnvidia-ml.so.1.
  static std::string LibraryPath();

  // Loads `path`, resolves every entry point and initializes NVML.
  // NotFound when the library cannot be opened, InvalidArgument when it
  // lacks an entry point (not an NVML library), Unavailable when
  // nvmlInit_v2 fails (no driver); each message names the library and what
  // to do.
  static Result<std::unique_ptr<Nvml>> Load(const std::string& path);

  const std::string& path() const { return path_; }
  unsigned gpus() const { return gpus_; }

  std::string Describe(int code) const;
  int UncorrectedEcc(unsigned gpu, unsigned long long* count) const;  // volatile counter
  int Remapped(unsigned gpu, RemappedRows* rows) const;
  int ThrottleReasons(unsigned gpu, unsigned long long* reasons) const;

  // Registers every GPU for Xid critical errors (GPUs that cannot deliver
  // events are skipped); events from then on are kept for WaitXid. Once.
  int WatchXids();
  // Waits up to `timeout_ms` for an Xid after WatchXids succeeded:
  // kNvmlSuccess with *event filled, kNvmlTimeout when none came.
  int WaitXid(unsigned timeout_ms, XidEvent* event);

 private:
  struct Api;
  Nvml() = default;
  std::string path_;
  void* lib_ = nullptr;
  std::unique_ptr<Api> api_;
  unsigned gpus_ = 0;
  std::vector<void*> devices_;  // nvmlDevice_t by index
  void* events_ = nullptr;      // nvmlEventSet_t, made by WatchXids
};

}  // namespace bulwark::agent
