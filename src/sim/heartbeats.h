// The simulated fleet's heartbeats, judged by the core's own liveness rule
// (controller/liveness_detector.h), as the plane's tick judges real agents'
// reports: a machine is lost when the detector's Check says so, not after a
// fixed timeout.
//
// Each agent reports every report_period, at a phase of its own (drawn from
// the seed and its id), so a rack's last reports before its switch failed
// are spread over a period, as they are on a real fleet, and the domain
// skew has something to do. A healthy machine is "heard continuously"
// (LivenessDetector::HeardContinuously) rather than fed each report: 12,500
// agents every 500 ms are 25,000 reports a simulated second, over a year
// 8e11. The lease still learns from them: each check feeds the gap samples
// the healthy agents' reports made since the last check (at most the 5 s
// the lease looks back), each one report period. A machine that goes down
// is heard last at its last report at or before its fault, and the checks
// run every tick_period, on the plane's tick grid, while any silent machine
// may yet be lost.
//
// Not modelled: a peer seeing a dead machine's connections close (a host
// that loses power or panics sends no FIN or RST); PeerClosed exists for
// traces that have one. Nor the plane's own lag (no stalls, no mass
// silences of its making, no re-attach after a controller restart).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include "controller/cluster_state.h"
#include "controller/liveness_detector.h"

namespace bulwark::sim {

class Heartbeats {
 public:
  struct Options {
    controller::LivenessOptions liveness;
    controller::Duration report_period = std::chrono::milliseconds(500);
    controller::Duration tick_period = std::chrono::milliseconds(250);
    uint64_t seed = 1;
  };
  explicit Heartbeats(Options o) : o_(o), detector_(o.liveness) {}

  // `m`'s agent reports from `now` on (registered, back, repaired).
  void Up(const controller::MachineId& m, const std::string& domain, controller::Time now);
  // `m`'s agent stops at `now` (its host died, its switch cut it off): its
  // last report was its last beat at or before `now`.
  void Down(const controller::MachineId& m, controller::Time now);
  // A peer of `m`, heard at `at`, reports `m`'s connections closed.
  void PeerClosed(const controller::MachineId& m, controller::Time at);

  // When `m`'s agent reports: phase + k * report_period.
  controller::Duration PhaseOf(const controller::MachineId& m) const;
  controller::Time LastBeat(const controller::MachineId& m, controller::Time t) const;
  // The first tick of the plane's grid (multiples of tick_period) after `now`.
  controller::Time NextTick(controller::Time now) const;

  // Whether a check may lose anyone: a silent machine, not lost, that the
  // policy still watches (LivenessDetector::Watching).
  bool Watching(const controller::ClusterState& state) const { return detector_.Watching(state) > 0; }
  // One tick's check at `now`: the machines lost now, alone ones longest
  // silent first (each already marked lost), then a domain's together.
  controller::LivenessDetector::Verdict Check(controller::Time now, const controller::ClusterState& state);

  const controller::LivenessDetector& detector() const { return detector_; }
  int64_t checks() const { return checks_; }

 private:
  Options o_;
  controller::LivenessDetector detector_;
  int64_t up_ = 0;  // agents reporting (continuously heard)
  std::unordered_map<controller::MachineId, bool> is_up_;
  std::unordered_map<controller::MachineId, controller::Time> closed_seen_;
  controller::Time gaps_fed_{};  // the healthy agents' gaps are fed up to here
  int64_t checks_ = 0;
};

}  // namespace bulwark::sim
