// Monitors: the implicit-fault detectors of one job, together, and when
// they are armed.
//
// The detectors turn the ranks' signals and the passing of time into policy
// events (HangSuspected, TrainingAnomaly, FailSlowSuspected); the caller
// hands those to Controller::Handle like any agent's event, so they are
// journaled and replayed while the signals themselves are not. They watch
// only while ranks run: a restart re-arms them with the first step's
// allowance, a stop or a wait for machines disarms them. The plane drives
// this with the wall clock; the simulator with its virtual one.
#pragma once

#include <vector>

#include "controller/action.h"
#include "controller/anomaly_detector.h"
#include "controller/fail_slow_detector.h"
#include "controller/hang_detector.h"
#include "controller/topology.h"

namespace bulwark::controller {

class Monitors {
 public:
  explicit Monitors(const PolicyConfig& config) : hang_(config), slow_(config), anomaly_(config) {}

  // The ranks of `layout` (its world, TP and PP sizes) were (re)started at
  // `now`.
  void Started(Time now, const Topology& layout);
  // As Started, for ranks a restarted controller took over that had
  // reported steps up to `last_step` (HangDetector::Resumed).
  void Resumed(Time now, const Topology& layout, int64_t last_step);
  void Stop();
  // Follows the policy's decisions: RestartAll arms (the placement's world
  // in `layout`'s TP x PP), StopJob and WaitForMachines disarm.
  void AfterActions(const std::vector<Action>& actions, Time now, const Topology& layout);

  void Observe(const RankSignal& s);
  void Observe(const RankPhase& p) { hang_.Observe(p); }

  // What the detectors found by `now`: an anomaly first (it names a step),
  // then a hang, then a slow machine.
  std::vector<Event> Check(Time now);

  // This process stalled for `d`: HangDetector::Credit.
  void Stalled(Time now, Duration d) { hang_.Credit(now, d); }
  bool armed() const { return armed_; }
  Duration hang_allowance() const { return hang_.Allowance(); }
  const std::string& slow_round() const { return slow_.last_round(); }
  double slow_max_unflagged() const { return slow_.max_unflagged_ratio(); }
  double slow_max_unflagged_long() const { return slow_.max_unflagged_long(); }

 private:
  bool armed_ = false;
  HangDetector hang_;
  FailSlowDetector slow_;
  AnomalyDetector anomaly_;
};

}  // namespace bulwark::controller
