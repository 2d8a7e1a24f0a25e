#include "controller/policy_config.h"

namespace bulwark::controller {

Status PolicyConfig::Validate() const {
  if (network_alerts_to_evict < 1) {
    return Status::InvalidArgument("policy: network_alerts_to_evict must be at least 1");
  }
  if (network_alert_window.count() <= 0) {
    return Status::InvalidArgument("policy: network_alert_window must be positive");
  }
  if (crash_window.count() <= 0) return Status::InvalidArgument("policy: crash_window must be positive");
  if (max_crashes_without_progress < 1) {
    return Status::InvalidArgument("policy: max_crashes_without_progress must be at least 1");
  }
  if (!(daily_failure_rate >= 0.0 && daily_failure_rate <= 1.0)) {
    return Status::InvalidArgument("policy: daily_failure_rate " + std::to_string(daily_failure_rate) +
                                   " is not a probability in [0, 1]");
  }
  if (!(crash_loop_quantile > 0.0 && crash_loop_quantile < 1.0)) {
    return Status::InvalidArgument("policy: crash_loop_quantile " + std::to_string(crash_loop_quantile) +
                                   " is outside (0, 1); 0.999 calls a loop only when chance is that unlikely");
  }
  if (!(standby_quantile > 0.0 && standby_quantile <= 1.0)) {
    return Status::InvalidArgument("policy: standby_quantile " + std::to_string(standby_quantile) +
                                   " is outside (0, 1]");
  }
  if (ledger_window.count() <= 0) return Status::InvalidArgument("policy: ledger_window must be positive");
  if (!(hang_factor >= 1.0)) return Status::InvalidArgument("policy: hang_factor must be at least 1");
  if (hang_floor.count() <= 0 || hang_first_step.count() <= 0 || trace_deadline.count() <= 0 ||
      process_stuck.count() <= 0 || slow_round.count() <= 0 || anomaly_wait.count() <= 0) {
    return Status::InvalidArgument(
        "policy: hang_floor, hang_first_step, trace_deadline, process_stuck, slow_round and anomaly_wait must be "
        "positive");
  }
  if (standby_ready_wait < Duration::zero()) {
    return Status::InvalidArgument("policy: standby_ready_wait is negative; give 0 (take standbys at once) or more");
  }
  if (hang_warmup_steps < 1) return Status::InvalidArgument("policy: hang_warmup_steps must be at least 1");
  if (hang_window < 1 || spike_window < 1 || slow_rounds < 1 || slow_min_steps < 1 || spike_min_history < 1) {
    return Status::InvalidArgument(
        "policy: hang_window, spike_window, spike_min_history, slow_rounds and slow_min_steps must be at least 1");
  }
  if (!(slow_ratio > 1.0) || !(slow_jobwide_ratio > 1.0) || !(spike_factor > 1.0)) {
    return Status::InvalidArgument("policy: slow_ratio, slow_jobwide_ratio and spike_factor must be above 1");
  }
  if (slow_long_ratio != 0 && (!(slow_long_ratio > 1.0) || slow_long_rounds < slow_rounds)) {
    return Status::InvalidArgument(
        "policy: slow_long_ratio must be above 1 (0: off) and slow_long_rounds at least slow_rounds");
  }
  if (slow_link_ratio != 0 && !(slow_link_ratio > 1.0)) {
    return Status::InvalidArgument("policy: slow_link_ratio must be above 1, or 0 to turn the link check off");
  }
  if (domain_burst_machines < 0 || domain_burst_window.count() < 0 || domain_probation.count() < 0) {
    return Status::InvalidArgument(
        "policy: domain_burst_machines, domain_burst_window and domain_probation must be >= 0 (0 machines: no domain rule)");
  }
  BULWARK_RETURN_IF_ERROR(ladder.Validate());
  return Status::OK();
}

}  // namespace bulwark::controller
