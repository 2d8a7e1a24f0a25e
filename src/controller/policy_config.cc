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
  if (!(standby_quantile > 0.0 && standby_quantile <= 1.0)) {
    return Status::InvalidArgument("policy: standby_quantile " + std::to_string(standby_quantile) +
                                   " is outside (0, 1]");
  }
  if (ledger_window.count() <= 0) return Status::InvalidArgument("policy: ledger_window must be positive");
  return Status::OK();
}

}  // namespace bulwark::controller
