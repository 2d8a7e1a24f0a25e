// Inspector: the machine's real-time health checks, run about once a second.
//
// On the local backend the device and the NIC are emulated by files in the
// machine's directory (cluster/layout.h): a fault injector writes them, and
// this reads them exactly as it would read nvidia-smi or a link state. Disk
// and memory are real: free space under the machine directory and the
// host's available memory.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace bulwark::agent {

struct HealthReading {
  bool device_ok = true;
  std::string device_detail;
  bool nic_up = true;
  bool disk_ok = true;
  std::string disk_detail;
  bool memory_ok = true;
  std::string memory_detail;
};

struct InspectorPaths {
  std::string device;  // "ok", or the error the device reports
  std::string nic;     // "up" or "down"
  std::string disk;    // a directory on the disk the ranks write to
};

HealthReading Inspect(const InspectorPaths& paths);

// Resets the emulated device and NIC to healthy: a repaired machine.
void ResetEmulatedHealth(const InspectorPaths& paths);

// The state letter of /proc/PID/stat ('R', 'S', 'D', 'T', ...), or 0.
char ProcessState(pid_t pid);

// StuckRanks: ranks that stay stopped (T) or in uninterruptible sleep (D):
// a hung driver call, a debugger left attached. They make no progress and
// may not even die.
class StuckRanks {
 public:
  using Clock = std::chrono::steady_clock;
  explicit StuckRanks(Clock::duration limit) : limit_(limit) {}
  // Reads each rank's state (rank -> pid); returns, once per episode, a line
  // for each rank stuck `limit` or longer. A rank not passed is forgotten.
  std::vector<std::pair<int, std::string>> Check(const std::map<int, pid_t>& pids, Clock::time_point now);

 private:
  Clock::duration limit_;
  std::map<int, Clock::time_point> since_;
  std::set<int> reported_;
};

}  // namespace bulwark::agent
