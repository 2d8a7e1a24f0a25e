// Every threshold the policy uses, with the defaults it ships with.
#pragma once

#include <chrono>
#include <set>
#include <string>

#include "common/status.h"
#include "controller/event.h"
#include "controller/time.h"

namespace bulwark::controller {

struct PolicyConfig {
  // NIC flaps usually heal; ByteRobust evicts only after 2 alerts in 5 min.
  int network_alerts_to_evict = 2;
  Duration network_alert_window = std::chrono::minutes(5);

  // Software crashes (no machine indicated) within this window are looked at
  // together: a second one on the same machine evicts it.
  Duration crash_window = std::chrono::minutes(10);
  // Crashes within the window with no step completed in between that stop
  // the job: restarts are bounded by progress, not by count alone.
  int max_crashes_without_progress = 3;

  // Log signatures that name the machine's hardware: evict at once. "nccl"
  // alone is not one: every surviving rank reports an NCCL error when one
  // peer dies, so it would evict healthy machines; the agent reports
  // "nccl_hardware" when the NCCL error names a local link or device.
  std::set<std::string> hardware_signatures = {"xid", "ecc", "cuda_error", "nccl_hardware"};
  // Failed inspections that evict at once. A failed process inspection says
  // the training process, not the machine, is in trouble: it is handled
  // like a crash of that machine's ranks.
  std::set<InspectionKind> evicting_inspections = {InspectionKind::kDevice, InspectionKind::kDisk,
                                                   InspectionKind::kMemory};

  // Standby pool target: the `standby_quantile` of Binomial(N, p) for N
  // machines in the job and p this per-machine daily failure rate.
  double daily_failure_rate = 0.005;
  double standby_quantile = 0.99;

  // The sliding window of the ETTR ledger.
  Duration ledger_window = std::chrono::hours(1);

  // InvalidArgument naming the first field out of range.
  Status Validate() const;
};

}  // namespace bulwark::controller
