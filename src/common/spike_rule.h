// The one rule for a loss or gradient-norm spike (ByteRobust: a 5x jump
// over the rolling median, or a NaN). The controller's AnomalyDetector and
// the trainer's step guard (trainer/step/step_driver.cc) both apply it, with the
// thresholds of the job's policy (controller/policy_config.h), which the
// agent hands each rank in BULWARK_SPIKE_RULE: when the two disagreed, the
// trainer held back a step the controller took for an ordinary one, or
// applied one the controller then rolled back.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <optional>
#include <string>
#include <vector>

namespace bulwark {

struct SpikeRule {
  double factor = 5.0;  // a value above factor x the median is a spike
  int window = 50;      // the median of the last `window` ordinary values
  int min_history = 20; // judged only once this many are known

  // "factor,window,min_history", what BULWARK_SPIKE_RULE carries.
  std::string Encode() const {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g,%d,%d", factor, window, min_history);
    return buf;
  }
  // nullopt when `text` is not three numbers with factor > 1 and counts >= 1.
  static std::optional<SpikeRule> Decode(const std::string& text) {
    SpikeRule r;
    char tail = 0;
    if (std::sscanf(text.c_str(), "%lf,%d,%d%c", &r.factor, &r.window, &r.min_history, &tail) != 3) return std::nullopt;
    if (!(r.factor > 1) || r.window < 1 || r.min_history < 1) return std::nullopt;
    return r;
  }
};

// The rolling window of a signal's ordinary values (anomalous steps are not
// remembered, so every value is finite and the order total), with a sorted
// copy kept in step: the median is one read, not a sort per report.
class SpikeHistory {
 public:
  explicit SpikeHistory(int window = SpikeRule().window) : window_(window) {}
  void Add(double value) {
    values_.push_back(value);
    sorted_.insert(std::upper_bound(sorted_.begin(), sorted_.end(), value), value);
    while (static_cast<int>(values_.size()) > window_) {
      sorted_.erase(std::lower_bound(sorted_.begin(), sorted_.end(), values_.front()));
      values_.pop_front();
    }
  }
  // Drops the newest value (a restart redoes its step).
  void PopBack() {
    sorted_.erase(std::lower_bound(sorted_.begin(), sorted_.end(), values_.back()));
    values_.pop_back();
  }
  void Clear() {
    values_.clear();
    sorted_.clear();
  }
  int size() const { return static_cast<int>(values_.size()); }
  // The element of rank size/2.
  double Median() const { return sorted_[sorted_.size() / 2]; }

  // Non-finite, or above rule.factor x the median once rule.min_history
  // values are known (a median of 0 judges nothing).
  bool Spike(double value, const SpikeRule& rule) const {
    if (!std::isfinite(value)) return true;
    if (size() < rule.min_history) return false;
    const double m = Median();
    return m > 0 && value > rule.factor * m;
  }

 private:
  int window_;
  std::deque<double> values_;
  std::vector<double> sorted_;
};

}  // namespace bulwark
