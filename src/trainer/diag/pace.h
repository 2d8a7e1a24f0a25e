// The machine's compute pace, emulated: a throttled device.
//
// A machine that computes F x slower (`bulwark inject slow`: a GPU held at a
// lower clock, a CPU throttled by heat) takes F x the device time for the
// same work. The local backend writes F into the machine's emulated
// hardware (cluster/local/emulated_hardware.h), in the file that
// BULWARK_PACE_FILE names; every rank on the machine reads it once a step
// and its step's compute is stretched to F x what it measured.
//
// Why in the rank and why measured in device time: on the local backend
// four emulated machines share two cores. Stopping and continuing a rank's
// processes from outside (as this backend once did) measured the host's
// scheduler: while the slowed rank was stopped its peers got its core, and
// once they waited for it in the all-reduce it had a core to itself, so a
// 2x fault read 1.17-1.49x. A CPU's device time is the CPU time its
// compute took, which does not depend on who else holds a core; a rank on
// a 1/F-clock CPU spends F x that. So on a CPU the stretch burns (F - 1) x
// the step's compute CPU time, and the step reports that CPU time as its
// device time (StepCompute; common/step_signal.h's device_ms), by which the
// fail-slow detector compares machines; on a GPU, whose time the host
// spends waiting on it, the stretch sleeps (F - 1) x the compute's wall time.
//
// Only the cause is emulated: the ranks really take longer, the job really
// slows, and the fail-slow detector finds the machine from the step
// reports alone.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace bulwark::trainer {

class PaceFile {
 public:
  // nullopt when BULWARK_PACE_FILE is not set.
  static std::optional<PaceFile> FromEnv();
  // Reads the file again when it changed since the last call: one stat(2).
  void Poll();
  // 1 when healthy (absent, unreadable, "1", or anything not above 1).
  double factor() const { return factor_; }

 private:
  std::string path_;
  int64_t seen_ns_ = -3;
  double factor_ = 1;
};

// This process's CPU time in ms (every thread: the intra-op pool computes too).
double ProcessCpuMs();

// The device time of a step's compute: on a CPU the process's CPU time,
// on a GPU the wall time less the waits for neighbours.
class StepCompute {
 public:
  explicit StepCompute(bool cpu_device) : cpu_(cpu_device) {}
  void Begin();
  // The compute since Begin, `wait_ms` of it spent blocked on neighbours.
  double Ms(double wait_ms) const;
  // Stretches the compute since Begin to `factor` x (PaceFile): burns or
  // sleeps (factor - 1) x Ms(wait_ms). No-op at factor <= 1.
  void Stretch(double factor, double wait_ms) const;

 private:
  bool cpu_;
  double cpu0_ = 0;
  int64_t wall0_ns_ = 0;
};

// Spins on this thread until it has used `ms` more of CPU time.
void BurnCpuMs(double ms);

}  // namespace bulwark::trainer
