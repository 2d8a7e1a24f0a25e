// The end of a simulated run: the arm's figures from the controller's own
// ledger and incidents (ETTR, the stalls, progress in steps, detection and
// recovery times). FleetSim's method, beside fleet_sim.cc.
#include "sim/fleet_model.h"

namespace bulwark::sim::fleet {

void FleetSim::Finish() {
  if (!r_.fleet.stopped) {
    SyncProgress();
  }
  r_.fleet.high_water = std::max(high_water_, reported_);
  const Time end = r_.fleet.stopped ? now_ : end_;
  ArmResult& a = r_.arms[0];
  // A stopped job accrues no ledger time; the rest of the horizon is lost,
  // so the arm's wall is always the horizon.
  const TimeBreakdown b = ctl_->Cumulative(end);
  a.wall = Seconds(end_ - Time{});
  for (int i = 0; i < kNumTimeCategories; ++i) a.by_category[i] = Seconds(b.by_category[i]);
  const double productive = a.by_category[static_cast<int>(TimeCategory::kProductive)];
  a.ettr = a.wall > 0 ? productive / a.wall : 0;
  a.checkpoint_stall =
      c_.costs.memory_checkpoints ? productive * c_.costs.memory_block_per_step / c_.costs.step
                                  : productive * c_.costs.durable_write / (c_.costs.durable_interval + c_.costs.durable_write);
  a.ettr_with_stalls = a.wall > 0 ? (productive - a.checkpoint_stall) / a.wall : 0;
  // Progress itself: the new steps the job reached, at the full-width step
  // time. The ledger approximates it (a step below full width counts its
  // replicas' share, not its slower pace).
  a.ettr_by_steps = a.wall > 0 ? static_cast<double>(r_.fleet.high_water) * c_.costs.step / a.wall : 0;
  r_.fleet.timeline = ctl_->Timeline(end);
  a.window_min_ettr = MinWindowEttr(r_.fleet.timeline, c_.policy.ledger_window);
  a.longest_unproductive = LongestUnproductive(r_.fleet.timeline);

  double detect = 0, recover = 0;
  int64_t closed = 0;
  for (const Incident& inc : ctl_->incidents()) {
    ++r_.fleet.incidents[IncidentClassName(inc.cls)][ResolutionName(inc.resolution)];
    if (!inc.domain.empty()) ++r_.fleet.domain_incidents;
    if (inc.recovered && inc.RecoverDuration()) {
      detect += Seconds(inc.DetectDuration());
      recover += Seconds(*inc.RecoverDuration());
      ++closed;
    }
  }
  r_.fleet.incident_count = static_cast<int64_t>(ctl_->incidents().size());
  CountOutOfService();
  if (closed > 0) {
    r_.fleet.mean_detect = detect / closed;
    r_.fleet.mean_recover = recover / closed;
  }
}

}  // namespace bulwark::sim::fleet
