// Emulator: the local backend's hand on its machines' hardware, for the
// controller that `bulwark inject` asks. A fault of a part is written into
// the machine's emulated hardware (emulated_hardware.h), where the agent's
// checks read that part; a slow machine (`inject slow`) is also carried
// out here, by a SlowInjector over the processes that compute on it. The
// agent neither receives these injections nor helps make them: it meets
// them as it would meet a broken part.
//
// The slowdown is hardware state too (health/pace): a controller that
// restarts resumes it, as a machine stays slow whoever watches it. It lives
// in the controller's process because that process runs on the cluster's
// host for every local cluster (and for the Slurm test cluster).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "cluster/layout.h"
#include "cluster/local/slow_injector.h"
#include "common/status.h"

namespace bulwark::cluster {

// How long `inject nic-flap` takes the emulated link down.
constexpr auto kNicFlapDown = std::chrono::milliseconds(2000);

// The processes that compute on machine `id`: those under its agent that
// hold its device (BULWARK_SDC_FILE in their environment, as the agent
// gives its ranks, spares and alignment runs), and their children. A
// throttled GPU slows them, not the host's own daemons (the agent, its
// stack captures).
std::set<pid_t> ComputingProcesses(const Layout& layout, const std::string& id);

class Emulator {
 public:
  // Resumes the slowdowns the machines' hardware holds.
  explicit Emulator(Layout layout);
  ~Emulator();  // the slowed processes run freely again
  Emulator(const Emulator&) = delete;
  Emulator& operator=(const Emulator&) = delete;

  // device-fail, compute-fail, nic-flap, slow-link, sdc and slow.
  static bool Makes(const std::string& fault);
  // `factor`: slow and slow-link's F, sdc's rate; `where`: sdc's mode.
  Status Inject(const std::string& machine, const std::string& fault, double factor, const std::string& where);
  // Every part of `machine` healthy again, its slowdown ended.
  Status Repair(const std::string& machine);

 private:
  void Slow(const std::string& machine, double factor);
  const Layout layout_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<SlowInjector>> slow_;
};

}  // namespace bulwark::cluster
