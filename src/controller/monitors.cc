#include "controller/monitors.h"

namespace bulwark::controller {

void Monitors::Started(Time now, const Topology& layout) {
  armed_ = true;
  hang_.Started(now);
  slow_.Started(now, layout);
  anomaly_.Started(now, layout.world);
}

void Monitors::Resumed(Time now, const Topology& layout, int64_t last_step) {
  Started(now, layout);
  hang_.Resumed(now, last_step);
}

void Monitors::Stop() {
  armed_ = false;
  hang_.Stop();
  slow_.Stop();
  anomaly_.Stop();
}

void Monitors::AfterActions(const std::vector<Action>& actions, Time now, const Topology& layout) {
  for (const Action& a : actions) {
    if (a.kind == ActionKind::kRestartAll) Started(now, Topology{a.placement.world_size(), layout.tp, layout.pp});
    // Stop-time diagnostics stop the ranks on purpose: no step is no hang.
    if (a.kind == ActionKind::kStopJob || a.kind == ActionKind::kWaitForMachines ||
        a.kind == ActionKind::kRunDiagnostics) {
      Stop();
    }
  }
}

void Monitors::Observe(const RankSignal& s) {
  if (!armed_) return;
  anomaly_.Observe(s);
  hang_.Observe(s);
  slow_.Observe(s);
}

std::vector<Event> Monitors::Check(Time now) {
  std::vector<Event> out;
  if (!armed_) return out;
  if (auto a = anomaly_.Check(now)) out.emplace_back(std::move(*a));
  // While an anomalous step waits for its verdict the ranks hold still on
  // purpose: that is no hang.
  if (out.empty()) {
    if (auto h = hang_.Check(now)) out.emplace_back(std::move(*h));
  }
  if (auto f = slow_.Check(now)) out.emplace_back(std::move(*f));
  return out;
}

}  // namespace bulwark::controller
