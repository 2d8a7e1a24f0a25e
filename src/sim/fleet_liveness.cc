// Which silent machines are lost, in the simulator: the core's liveness
// rule (controller/liveness_detector.h) over the modelled reports of every
// machine (heartbeats.h), checked at the plane's tick, as the plane does.
// FleetSim's methods, beside fleet_sim.cc.
#include "sim/fleet_model.h"

namespace bulwark::sim::fleet {

Heartbeats::Options FleetSim::HeartbeatOptions(const SimConfig& c) {
  Heartbeats::Options o;
  o.liveness.heartbeat_timeout = Secs(c.costs.heartbeat_timeout);
  o.liveness.closed_peer_timeout = Secs(c.costs.closed_peer_timeout);
  o.liveness.reconnect_grace = Secs(c.costs.reconnect_grace);
  o.report_period = Secs(c.costs.report_period);
  o.tick_period = Secs(c.costs.tick_period);
  o.seed = c.seed;
  return o;
}

void FleetSim::WatchSilence() {
  if (liveness_armed_ || !heartbeats_.Watching(ctl_->state())) return;
  liveness_armed_ = true;
  Schedule(heartbeats_.NextTick(now_), Kind::kLiveness);
}

// The plane's tick, for liveness: the core's Check, then the losses it
// found, alone ones one by one, a domain's as one decision.
void FleetSim::CheckLiveness() {
  liveness_armed_ = false;
  const LivenessDetector::Verdict v = heartbeats_.Check(now_, ctl_->state());
  FleetStats& f = r_.fleet;
  f.liveness_checks = heartbeats_.checks();
  f.max_lease = std::max(f.max_lease, Seconds(v.lease));
  if (v.mass_silent > 0) ++f.mass_silences;
  for (const LivenessDetector::Loss& l : v.alone) {
    ++f.heartbeat_lost;
    Deliver(MachineHeartbeatLost{l.machine, l.last_heard, now_});
  }
  if (!v.with_domain.empty()) {
    std::vector<Event> lost;
    for (const LivenessDetector::Loss& l : v.with_domain) lost.push_back(MachineHeartbeatLost{l.machine, l.last_heard, now_});
    f.heartbeat_lost_with_domain += static_cast<int64_t>(lost.size());
    DeliverAll(std::move(lost));
  }
  WatchSilence();
}

}  // namespace bulwark::sim::fleet
