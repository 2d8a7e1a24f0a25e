#include "agent/inspector.h"

#include <sys/statvfs.h>

#include <fstream>
#include <sstream>
#include <cstdlib>

#include "common/files.h"

namespace bulwark::agent {
namespace {

// Below these the ranks cannot write checkpoints or will be OOM-killed soon.
constexpr unsigned long long kMinFreeDiskBytes = 64ull << 20;
constexpr unsigned long long kMinAvailableMemoryKiB = 64ull << 10;

}  // namespace

HealthReading Inspect(const InspectorPaths& paths, GpuHealth* gpu) {
  HealthReading r;
  const std::string device = cluster::DeviceError(paths.Hardware());
  if (!device.empty()) {
    r.device_ok = false;
    r.device_detail = device;
  }
  if (gpu != nullptr) {
    const GpuVerdict v = gpu->Read();
    if (!v.ok) {
      r.device_ok = false;
      r.device_detail += (r.device_detail.empty() ? "" : "; ") + v.detail;
    }
    r.device_slowdown = v.slowdown;
  }
  if (paths.interface.empty()) {
    // The emulated NIC reads like the kernel's: its state and its count of
    // carrier changes, so that a flap between two readings is seen.
    const int64_t now = cluster::UnixMs();
    r.nic_up = cluster::NicUp(paths.Hardware(), now);
    LinkReading link;
    link.iface = "emulated";
    link.operstate = r.nic_up ? "up" : "down";
    link.carrier = r.nic_up;
    link.carrier_changes = cluster::NicCarrierChanges(paths.Hardware(), now);
    r.link = link;
  } else if (Result<LinkReading> link = ReadLink(paths.sysfs_net, paths.interface); link.ok()) {
    r.nic_up = LinkUp(*link);
    r.nic_detail = DescribeLink(*link);
    r.link = *link;
  } else {
    r.nic_up = false;  // the interface went away: no traffic crosses it
    r.nic_detail = link.status().message();
  }

  struct statvfs vfs;
  if (::statvfs(paths.disk.c_str(), &vfs) == 0) {
    const unsigned long long free_bytes = static_cast<unsigned long long>(vfs.f_bavail) * vfs.f_frsize;
    if (free_bytes < kMinFreeDiskBytes) {
      r.disk_ok = false;
      r.disk_detail = paths.disk + ": only " + std::to_string(free_bytes >> 20) + " MiB free";
    }
  }
  std::ifstream mem("/proc/meminfo");
  std::string key;
  unsigned long long kib = 0;
  std::string unit;
  while (mem >> key >> kib >> unit) {
    if (key == "MemAvailable:") {
      if (kib < kMinAvailableMemoryKiB) {
        r.memory_ok = false;
        r.memory_detail = "only " + std::to_string(kib >> 10) + " MiB of memory available";
      }
      break;
    }
  }
  return r;
}

int64_t ProcessCpuTicks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return -1;
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos) return -1;
  // After the command: state (field 3) ... utime (14), stime (15).
  std::istringstream rest(line.substr(paren + 2));
  std::string field;
  int64_t utime = -1, stime = -1;
  for (int f = 3; f <= 15 && rest >> field; ++f) {
    if (f == 14) utime = std::atoll(field.c_str());
    if (f == 15) stime = std::atoll(field.c_str());
  }
  return utime < 0 || stime < 0 ? -1 : utime + stime;
}

std::vector<std::pair<int, std::string>> StuckRanks::Check(const std::map<int, pid_t>& pids, Clock::time_point now) {
  std::vector<std::pair<int, std::string>> out;
  std::map<int, Seen> still;
  for (const auto& [rank, pid] : pids) {
    const char st = ProcessState(pid);
    if (st != 'D' && st != 'T') continue;
    const int64_t cpu = ProcessCpuTicks(pid);
    auto it = since_.find(rank);
    // Stuck since it was first seen so, unless it ran since the last reading.
    const bool ran = it != since_.end() && cpu >= 0 && it->second.cpu >= 0 && cpu > it->second.cpu;
    const Clock::time_point since = it == since_.end() || ran ? now : it->second.since;
    still[rank] = Seen{since, cpu};
    if (now - since >= limit_ && reported_.insert(rank).second) {
      out.emplace_back(rank, "rank " + std::to_string(rank) + " (pid " + std::to_string(pid) + ") " +
                                 (st == 'D' ? "in uninterruptible sleep (D)" : "stopped (T)") + " for " +
                                 std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now - since).count()) +
                                 " s");
    }
  }
  since_.swap(still);
  for (auto it = reported_.begin(); it != reported_.end();) it = since_.count(*it) ? std::next(it) : reported_.erase(it);
  return out;
}

}  // namespace bulwark::agent
