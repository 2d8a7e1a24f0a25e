// HangDetector: no step for longer than the job's step time allows.
//
// NVRx learns its timeouts from observed iterations; ByteRobust waits for 10
// minutes of zero RDMA traffic. Here the allowance is learned from the steps
// the ranks report (median of the last hang_window), so a tiny model's hang
// is noticed in seconds and a big model's long steps raise no false alarm.
// The first steps after a (re)start (hang_warmup_steps of them), and any
// phase a rank announces, get their own, longer allowance; warm-up steps
// are not learned from. It judges only ranks that report: until one of the
// run's ranks has said anything over the rank link (its agent sends a
// "start" phase when it connects), a program that does not speak the link
// (a plain PyTorch script, a pipeline loop without reports) is never called
// hung for its silence. A controller rebuilt from its journal judges a job
// whose ranks had reported steps at once (Resumed). Pure: fed signals and
// `now`.
#pragma once

#include <algorithm>
#include <deque>
#include <optional>

#include "controller/event.h"
#include "controller/policy_config.h"
#include "controller/signals.h"

namespace bulwark::controller {

class HangDetector {
 public:
  explicit HangDetector(const PolicyConfig& config) : config_(config) {}

  // Ranks were (re)started at `now`: the next step gets hang_first_step.
  void Started(Time now);
  // A controller rebuilt from its journal took over ranks that had reported
  // steps up to `last_step` under its predecessor. They speak the rank link
  // (and said "start" to the dead process), so silence counts from `now` at
  // once: a rank hung before the restart never speaks again, and waiting
  // for it to would never arm. The learned step time died with the
  // predecessor (signals are not journaled): the next step gets
  // hang_first_step, and the steps after it are learned at once (the ranks
  // are warm).
  void Resumed(Time now, int64_t last_step);
  // The controller itself stalled for `d` (no tick, no report read): the
  // ranks' steps in that time are in reports it has not read yet, so the
  // stall is not their silence, as it is no machine's (plane Tick).
  void Credit(Time now, Duration d) { last_progress_ = std::min(now, last_progress_ + d); }
  // The job is not training (waiting, stopped, done): no deadline.
  void Stop() { armed_ = false; }
  void Observe(const RankSignal& s);
  void Observe(const RankPhase& p);

  // The allowance the next step gets now.
  Duration Allowance() const;
  // A HangSuspected once the deadline passes; then nothing until a step
  // completes or the ranks restart.
  std::optional<HangSuspected> Check(Time now);

 private:
  const PolicyConfig& config_;
  bool armed_ = false;
  bool reporting_ = false;  // a rank of this run said something
  bool fired_ = false;
  bool first_step_ = true;  // no step since the start yet
  bool resumed_ = false;    // taken over from a predecessor: the ranks did step
  int steps_since_start_ = 0;
  int64_t last_step_ = 0;
  Time last_progress_{};
  std::optional<Duration> phase_;  // an announced phase's allowance, until the next step
  std::deque<double> step_ms_;     // learned step durations; kept across restarts
};

}  // namespace bulwark::controller
