#include "cluster/local/emulator.h"

#include "cluster/local/emulated_hardware.h"

namespace bulwark::cluster {

bool Emulator::Makes(const std::string& fault) {
  return fault == "device-fail" || fault == "compute-fail" || fault == "nic-flap" || fault == "slow-link" ||
         fault == "sdc" || fault == "slow";
}

Status Emulator::Inject(const std::string& machine, const std::string& fault, double factor,
                        const std::string& where) {
  const EmulatedHardware hw = HardwareOf(layout_.dir, machine);
  if (fault == "device-fail") return FailDevice(hw);
  if (fault == "nic-flap") return FlapNic(hw, kNicFlapDown, UnixMs());
  if (fault == "slow-link") return SlowLink(hw, factor > 1 ? factor : 10);
  if (fault == "compute-fail") {
    // A broken ALU also turns the machine's matmuls NaN (trainer/diag/sdc.h).
    BULWARK_RETURN_IF_ERROR(BreakAlu(hw));
    return CorruptCompute(hw, "nan:1.000000");
  }
  if (fault == "sdc") {
    return CorruptCompute(hw, (where.empty() ? std::string("nan") : where) + ":" + std::to_string(factor > 0 ? factor : 1.0));
  }
  // The machine's ranks read their pace each step (trainer/diag/pace.h).
  if (fault == "slow") return SlowCompute(hw, factor);
  return Status::InvalidArgument("the emulated hardware has no fault '" + fault + "'");
}

Status Emulator::Repair(const std::string& machine) { return cluster::Repair(HardwareOf(layout_.dir, machine)); }

}  // namespace bulwark::cluster
