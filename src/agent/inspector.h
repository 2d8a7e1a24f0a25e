// Inspector: the machine's real-time health checks, run about once a second.
//
// On the local backend the device and the NIC are emulated by files in the
// machine's directory (cluster/layout.h): a fault injector writes them, and
// this reads them exactly as it would read nvidia-smi or a link state. Disk
// and memory are real: free space under the machine directory and the
// host's available memory.
#pragma once

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

}  // namespace bulwark::agent
