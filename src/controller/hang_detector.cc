#include "controller/hang_detector.h"

#include <algorithm>
#include <vector>

namespace bulwark::controller {

void HangDetector::Started(Time now) {
  armed_ = true;
  reporting_ = false;
  fired_ = false;
  first_step_ = true;
  resumed_ = false;
  steps_since_start_ = 0;
  phase_.reset();
  last_step_ = 0;
  last_progress_ = now;
}

void HangDetector::Resumed(Time now, int64_t last_step) {
  Started(now);
  reporting_ = true;
  resumed_ = true;
  steps_since_start_ = config_.hang_warmup_steps;
  last_step_ = last_step;
}

void HangDetector::Observe(const RankSignal& s) {
  if (!armed_) return;
  reporting_ = true;
  // Steps of a run already seen (another rank's report of them) are no progress.
  if (s.step <= last_step_ && !first_step_) return;
  if (!s.halted.empty()) return;  // held back: the anomaly detector's case, not progress
  const bool warm = steps_since_start_ >= config_.hang_warmup_steps;
  steps_since_start_ += std::max(1, s.steps);
  if (warm && s.steps > 0 && s.step_ms > 0) {
    step_ms_.push_back(s.step_ms / s.steps);
    while (static_cast<int>(step_ms_.size()) > config_.hang_window) step_ms_.pop_front();
  }
  last_step_ = std::max(last_step_, s.step);
  last_progress_ = std::max(last_progress_, s.observed);
  first_step_ = false;
  fired_ = false;
  phase_.reset();
}

void HangDetector::Observe(const RankPhase& p) {
  if (!armed_) return;
  reporting_ = true;
  if (p.what == "start") return;  // a rank connected: it reports from now on
  // Another rank's report of a later step already arrived: the phase is
  // over (agents report independently, so it may come after that step).
  if (p.after_step < last_step_) return;
  const Duration d = std::chrono::duration_cast<Duration>(p.expected * config_.hang_factor);
  phase_ = std::max(d, config_.hang_floor);
  last_progress_ = std::max(last_progress_, p.observed);
}

Duration HangDetector::Allowance() const {
  if (first_step_ || steps_since_start_ < config_.hang_warmup_steps) return config_.hang_first_step;
  if (phase_) return *phase_;
  if (step_ms_.empty()) return config_.hang_first_step;
  std::vector<double> v(step_ms_.begin(), step_ms_.end());
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  const Duration learned(static_cast<int64_t>(v[v.size() / 2] * config_.hang_factor));
  return std::max(learned, config_.hang_floor);
}

std::optional<HangSuspected> HangDetector::Check(Time now) {
  if (!armed_ || fired_ || !reporting_) return std::nullopt;
  const Duration allowance = Allowance();
  if (now - last_progress_ <= allowance) return std::nullopt;
  fired_ = true;
  HangSuspected h;
  h.last_step = last_step_;
  h.since = last_progress_;
  h.allowance = allowance;
  h.first_step = first_step_ && !resumed_;
  h.observed = now;
  return h;
}

}  // namespace bulwark::controller
