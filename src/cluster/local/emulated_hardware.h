// The hardware the local backend emulates for a machine: what its device,
// NIC, ALU and network link would report, as files in the machine's health
// directory (cluster/layout.h). A fault injector breaks a part; an
// operator's repair (`bulwark machine return`) mends them all. The checks
// read the part they check where, on a real machine, they would read the
// hardware: the agent's inspector the device and the NIC, the GEMM check
// the ALU, the network check the link. No one else holds the fault, so it
// outlives the agent that was asked to inject it, as a broken part would.
//
// Under network namespaces the NIC and the link are real interfaces
// (cluster/local/netns.h) and these two files are not read.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace bulwark::cluster {

struct EmulatedHardware {
  std::string device;  // "ok", or the error the device reports
  std::string nic;     // "up", "down", or "down until <unix ms> flaps <n>"
  std::string alu;     // absent or "ok"; "wrong": one wrong element per GEMM
  std::string link;    // absent or "1": healthy; F: every transfer F x slower
  // absent or "ok"; "nan:R" / "drift:R": the machine's matmuls are silently
  // wrong now and then (trainer/diag/sdc.h), which every process on it that
  // computes reads through BULWARK_SDC_FILE.
  std::string sdc;
  // absent or "1": full speed; F: the machine computes F x slower (a
  // throttled GPU). cluster/local/emulator.h carries it out on the
  // processes that compute there.
  std::string pace;
};

// The parts of machine `id` in the cluster at `dir`.
EmulatedHardware HardwareOf(const std::string& dir, const std::string& id);

// --- breaking (the fault injector) ---
// An uncorrectable ECC error, as the driver reports it (Xid 48).
Status FailDevice(const EmulatedHardware& hw);
// The link goes down for `down` from `now_ms`, then comes back by itself;
// each flap is two carrier changes, as the kernel counts them.
Status FlapNic(const EmulatedHardware& hw, std::chrono::milliseconds down, int64_t now_ms);
// A broken ALU: every GEMM's result has one wrong element.
Status BreakAlu(const EmulatedHardware& hw);
// Silent corruption of the machine's matmuls: `spec` is "nan:R" or
// "drift:R" (trainer/diag/sdc.h), R the probability per step.
Status CorruptCompute(const EmulatedHardware& hw, const std::string& spec);
// A degraded link (a flaky cable, a NIC renegotiated down): F x slower.
Status SlowLink(const EmulatedHardware& hw, double factor);
// A machine that computes F x slower from now on.
Status SlowCompute(const EmulatedHardware& hw, double factor);
// Every part healthy (a part with no path is not emulated and skipped).
// Every part is mended even when one fails; the first failure is returned.
Status Repair(const EmulatedHardware& hw);

// --- reading (the checks) ---
// The device's error line, "" when healthy (no file: nothing reported one).
std::string DeviceError(const EmulatedHardware& hw);
bool NicUp(const EmulatedHardware& hw, int64_t now_ms);
// Carrier changes since the last repair (the kernel's carrier_changes): a
// flap that began and ended between two readings shows only here.
uint64_t NicCarrierChanges(const EmulatedHardware& hw, int64_t now_ms);
bool AluBroken(const EmulatedHardware& hw);
// 1 when healthy.
double LinkSlowdown(const EmulatedHardware& hw);
double ComputeSlowdown(const EmulatedHardware& hw);

int64_t UnixMs();

}  // namespace bulwark::cluster
