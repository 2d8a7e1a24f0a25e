// GpuHealth: a machine's GPUs, judged from NVML readings, for the
// inspector's device check (inspector.h).
//
// It reports what the controller's policy already understands as a failed
// device inspection (evict the machine, swap in a standby): uncorrectable
// ECC errors that rose since the agent started (or since the machine was
// returned), a row remap that failed or waits for a reset, a critical Xid
// (from an event-wait thread: Xids are events, not state) and a GPU that is
// lost. Clock slowdown for heat or a power brake is not a failure: it is a
// fail-slow hint, reported beside it.
//
// Why rises and not counts: volatile ECC counters persist until the driver
// reloads, so a count present at start was already seen (and judged) by
// whoever ran before; a rise is news.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "agent/nvml.h"
#include "common/mutex.h"

namespace bulwark::agent {

// What a critical Xid means ("fallen off the bus" for 79), or "" for an Xid
// that is not in the table: one that usually comes from the application.
const char* CriticalXidName(unsigned long long xid);

struct GpuVerdict {
  bool ok = true;
  std::string detail;    // every failure, "; "-joined: "GPU 0: uncorrectable ECC errors rose 0 -> 3"
  std::string slowdown;  // "" or "GPU 1 slowed down: thermal (hardware)"
};

class GpuHealth {
 public:
  using Logger = std::function<void(const std::string&)>;

  // Loads NVML (Nvml::LibraryPath()) and reads the baseline; nullptr with
  // one warning through `log` when NVML is missing or broken, so the caller
  // keeps the emulated device.
  static std::unique_ptr<GpuHealth> Open(const std::string& library, const Logger& log);

  // Starts the Xid thread.
  GpuHealth(std::unique_ptr<Nvml> nvml, Logger log);
  ~GpuHealth();  // stops the Xid thread (within its 250 ms wait)
  GpuHealth(const GpuHealth&) = delete;
  GpuHealth& operator=(const GpuHealth&) = delete;

  const Nvml& nvml() const { return *nvml_; }

  // Reads every GPU now. A failure stays reported until it is gone from
  // the hardware (a lost GPU, a pending remap) or, for rises and Xids,
  // until Rebaseline.
  GpuVerdict Read();

  // The machine was repaired and returned: today's counts become the
  // baseline and latched Xids are forgotten.
  void Rebaseline();

 private:
  void WaitForXids();

  std::unique_ptr<Nvml> nvml_;
  Logger log_;
  Mutex mu_;
  std::map<unsigned, unsigned long long> ecc_baseline_ GUARDED_BY(mu_);  // by GPU
  std::map<unsigned, unsigned long long> xid_ GUARDED_BY(mu_);           // the first critical Xid by GPU
  std::atomic<bool> stop_{false};
  std::thread xid_thread_;
};

}  // namespace bulwark::agent
