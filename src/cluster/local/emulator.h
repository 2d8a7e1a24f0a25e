// Emulator: the local backend's hand on its machines' hardware, for the
// controller that `bulwark inject` asks. A fault of a part is written into
// the machine's emulated hardware (emulated_hardware.h), where the agent's
// checks read that part and the ranks read their matmuls' corruption and
// their pace (`inject slow`: trainer/diag/pace.h says why the ranks carry
// the slowdown out themselves). The agent neither receives these
// injections nor helps make them: it meets them as it would meet a broken
// part. Each is state of the machine's files, so it outlives the
// controller that wrote it, as a machine stays slow whoever watches it.
#pragma once

#include <chrono>
#include <string>

#include "cluster/layout.h"
#include "common/status.h"

namespace bulwark::cluster {

// How long `inject nic-flap` takes the emulated link down.
constexpr auto kNicFlapDown = std::chrono::milliseconds(2000);

class Emulator {
 public:
  explicit Emulator(Layout layout) : layout_(std::move(layout)) {}

  // device-fail, compute-fail, nic-flap, slow-link, sdc and slow.
  static bool Makes(const std::string& fault);
  // `factor`: slow and slow-link's F, sdc's rate; `where`: sdc's mode.
  Status Inject(const std::string& machine, const std::string& fault, double factor, const std::string& where);
  // Every part of `machine` healthy again, its slowdown ended.
  Status Repair(const std::string& machine);

 private:
  const Layout layout_;
};

}  // namespace bulwark::cluster
