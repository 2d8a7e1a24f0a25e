// Inspector: the machine's real-time health checks, run about once a second.
//
// On the local backend the device and the NIC are emulated hardware
// (cluster/local/emulated_hardware.h): a fault injector breaks them, and
// this reads them exactly as it would read nvidia-smi or a link state. Given
// the machine's interface (InspectorPaths::interface), the link is the
// kernel's instead (net_link.h). Disk
// and memory are real: free space under the machine directory and the
// host's available memory. Where NVML loads (gpu_health.h) the real GPUs
// are read too; the emulated file stays readable beside them, so the local
// fault injector still works on a GPU host.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/gpu_health.h"
#include "agent/net_link.h"
#include "cluster/local/emulated_hardware.h"
#include "common/status.h"

namespace bulwark::agent {

struct HealthReading {
  bool device_ok = true;
  std::string device_detail;
  std::string device_slowdown;  // a fail-slow hint from NVML, not a failure ("" none)
  bool nic_up = true;
  std::string nic_detail;           // the kernel's view, when an interface is watched
  std::optional<LinkReading> link;  // that reading, for the flaps between two inspections
  bool disk_ok = true;
  std::string disk_detail;
  bool memory_ok = true;
  std::string memory_detail;
};

struct InspectorPaths {
  std::string device;  // "ok", or the error the device reports
  std::string nic;     // "up" or "down": the emulated link, when no interface is watched
  std::string disk;    // a directory on the disk the ranks write to
  // The machine's own network interface ("": none; the emulated link file
  // stands for it), read from the kernel under `sysfs_net`.
  std::string interface;
  std::string sysfs_net = "/sys/class/net";
  // The emulated ALU, link, matmul corruption and compute pace (the GEMM
  // and network checks read the first two, every computing process the
  // last two).
  std::string alu, link, sdc, pace;

  cluster::EmulatedHardware Hardware() const { return {device, nic, alu, link, sdc, pace}; }
};

// `gpu` null: no NVML, the emulated device alone.
HealthReading Inspect(const InspectorPaths& paths, GpuHealth* gpu = nullptr);

// A process's CPU time so far (utime + stime, in clock ticks), or -1.
int64_t ProcessCpuTicks(pid_t pid);

// StuckRanks: ranks that stay stopped (T) or in uninterruptible sleep (D)
// with no CPU time gained: a hung driver call, a debugger left attached.
// They make no progress and may not even die. A rank that ran between two
// readings is not stuck, whatever state they caught it in: a machine
// throttled by stopping its processes in short periods (a slowed machine's
// emulation, a cgroup freezer's duty cycle) is slow, not stuck, and is the
// fail-slow detector's to find.
class StuckRanks {
 public:
  using Clock = std::chrono::steady_clock;
  explicit StuckRanks(Clock::duration limit) : limit_(limit) {}
  // The policy's limit, as the controller's START_RANKS carries it.
  void set_limit(Clock::duration limit) { limit_ = limit; }
  // Reads each rank's state (rank -> pid); returns, once per episode, a line
  // for each rank stuck `limit` or longer. A rank not passed is forgotten.
  std::vector<std::pair<int, std::string>> Check(const std::map<int, pid_t>& pids, Clock::time_point now);

 private:
  struct Seen {
    Clock::time_point since;  // stuck since
    int64_t cpu = -1;         // CPU ticks at the last reading
  };
  Clock::duration limit_;
  std::map<int, Seen> since_;
  std::set<int> reported_;
};

}  // namespace bulwark::agent
