#include "controller/anomaly_detector.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace bulwark::controller {
namespace {

double MedianOf(const std::deque<double>& d) {
  std::vector<double> v(d.begin(), d.end());
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// The element of rank size/2, as MedianOf picks.
double MiddleOf(const std::vector<double>& sorted) { return sorted[sorted.size() / 2]; }

// Appends `value` to a rolling window of at most `window` values, keeping
// its sorted copy in step. Only finite values come here (anomalous steps
// are not remembered), so the order is total.
void Roll(std::deque<double>& window_values, std::vector<double>& sorted, double value, int window) {
  window_values.push_back(value);
  sorted.insert(std::upper_bound(sorted.begin(), sorted.end(), value), value);
  while (static_cast<int>(window_values.size()) > window) {
    sorted.erase(std::lower_bound(sorted.begin(), sorted.end(), window_values.front()));
    window_values.pop_front();
  }
}

std::string Num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", x);
  return buf;
}

}  // namespace

bool AnomalyDetector::IsSpike(double value, const std::deque<double>& history, double factor, int min_history) {
  if (!std::isfinite(value)) return true;
  if (static_cast<int>(history.size()) < min_history) return false;
  const double median = MedianOf(history);
  return median > 0 && value > factor * median;
}

void AnomalyDetector::Started(Time now, int world) {
  armed_ = true;
  rewind_ = true;
  world_ = world;
  pending_.clear();
  recent_.clear();
  reported_ = 0;
}

void AnomalyDetector::Remember(const RankSignal& s) {
  if (s.step <= history_step_) return;  // another rank's report of a step already counted
  history_step_ = s.step;
  loss_median_.reset();
  grad_norm_median_.reset();
  steps_.push_back(s.step);
  Roll(loss_, loss_sorted_, s.loss, config_.spike_window);
  Roll(grad_norm_, grad_norm_sorted_, s.grad_norm, config_.spike_window);
  while (steps_.size() > loss_.size()) steps_.pop_front();
}

// A job restarted from the state after step first-1 redoes the steps from
// `first` on: their values in the history are not its past. A restart from
// memory drops a step or none; one from step 0 (a job with no checkpoint)
// drops them all, so its first, high losses are not spikes against the
// late-training median.
void AnomalyDetector::Rewind(int64_t first) {
  while (!steps_.empty() && steps_.back() >= first) {
    loss_sorted_.erase(std::lower_bound(loss_sorted_.begin(), loss_sorted_.end(), loss_.back()));
    grad_norm_sorted_.erase(std::lower_bound(grad_norm_sorted_.begin(), grad_norm_sorted_.end(), grad_norm_.back()));
    loss_.pop_back();
    grad_norm_.pop_back();
    steps_.pop_back();
  }
  history_step_ = std::min(history_step_, first - 1);
  loss_median_.reset();
  grad_norm_median_.reset();
}

void AnomalyDetector::Observe(const RankSignal& s) {
  if (!armed_) return;
  if (rewind_) {
    rewind_ = false;
    Rewind(s.step);
  }
  if (s.step <= reported_) return;
  const bool nonfinite = s.nonfinite || s.local_nonfinite || !std::isfinite(s.loss) || !std::isfinite(s.grad_norm);
  // Every rank reports the same step against the same history: the
  // medians are computed once per step (Remember clears them), not once per
  // report (a simulated 100k-GPU year spent 8% of its time here).
  auto over = [&](double value, const std::vector<double>& sorted, std::optional<double>& median) {
    if (!std::isfinite(value)) return true;
    if (static_cast<int>(sorted.size()) < config_.spike_min_history) return false;
    if (!median) median = MiddleOf(sorted);
    return *median > 0 && value > config_.spike_factor * *median;
  };
  const bool spike = !nonfinite && (over(s.loss, loss_sorted_, loss_median_) || over(s.grad_norm, grad_norm_sorted_, grad_norm_median_));
  const bool anomalous = nonfinite || spike || !s.halted.empty();
  if (!anomalous && pending_.count(s.step) == 0) {
    // An ordinary step: history, and kept a little while in case another
    // rank reports this step as anomalous (its report then shows this
    // rank's local values were fine).
    Remember(s);
    if (s.steps == 1) recent_[s.step][s.rank] = s;
    while (recent_.size() > 8) recent_.erase(recent_.begin());
    return;
  }
  Pending& p = pending_[s.step];
  if (p.reports.empty()) {
    p.first_seen = s.observed;
    auto it = recent_.find(s.step);
    if (it != recent_.end()) p.reports = it->second;
  }
  if (nonfinite || s.halted == "nan") p.kind = "nan";
  if (p.kind.empty()) p.kind = "spike";
  p.reports[s.rank] = s;
}

std::optional<TrainingAnomaly> AnomalyDetector::Check(Time now) {
  if (!armed_) return std::nullopt;
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    const int64_t step = it->first;
    Pending& p = it->second;
    const bool complete = static_cast<int>(p.reports.size()) >= world_;
    if (!complete && now - p.first_seen < config_.anomaly_wait) continue;

    // Culprits: ranks whose own values were bad while some other rank's were fine.
    std::vector<int> bad, fine;
    std::vector<double> local_norms;
    for (const auto& [rank, r] : p.reports) {
      if (std::isfinite(r.local_grad_norm)) local_norms.push_back(r.local_grad_norm);
    }
    std::deque<double> local_history(local_norms.begin(), local_norms.end());
    for (const auto& [rank, r] : p.reports) {
      bool own_bad = r.local_nonfinite || !std::isfinite(r.local_grad_norm);
      if (!own_bad && p.kind == "spike" && local_norms.size() >= 3) {
        // A local spike against the other ranks' norms of the same step.
        std::deque<double> others;
        for (const auto& [q, o] : p.reports) {
          if (q != rank && std::isfinite(o.local_grad_norm)) others.push_back(o.local_grad_norm);
        }
        own_bad = IsSpike(r.local_grad_norm, others, config_.spike_factor, 2);
      }
      (own_bad ? bad : fine).push_back(rank);
    }
    TrainingAnomaly a;
    a.step = step;
    a.kind = p.kind;
    a.observed = now;
    a.at = p.first_seen;
    a.reports = static_cast<int>(p.reports.size());
    a.halted = std::any_of(p.reports.begin(), p.reports.end(), [](const auto& kv) { return !kv.second.halted.empty(); });
    std::map<MachineId, bool> machines;
    if (!bad.empty() && !fine.empty()) {
      for (int r : bad) {
        a.culprit_ranks.push_back(r);
        machines[p.reports[r].machine] = true;
      }
      for (const auto& [m, _] : machines) a.culprits.push_back(m);
    }
    const RankSignal& any = p.reports.begin()->second;
    a.detail = (p.kind == "nan" ? "non-finite loss or gradients" : "loss or grad-norm spike") +
               std::string(" at step ") + std::to_string(step) + " (loss " + Num(any.loss) + ", grad norm " +
               Num(any.grad_norm);
    if (p.kind == "spike" && !loss_.empty()) {
      a.detail += "; rolling medians " + Num(MiddleOf(loss_sorted_)) + " and " + Num(MiddleOf(grad_norm_sorted_));
    }
    a.detail += "); " + std::to_string(p.reports.size()) + "/" + std::to_string(world_) + " ranks reported";
    if (!a.culprits.empty()) {
      a.detail += "; local values bad on rank(s)";
      for (int r : a.culprit_ranks) a.detail += " " + std::to_string(r);
      a.detail += " only";
    } else if (!bad.empty()) {
      a.detail += "; every rank's local values were bad: no culprit";
    } else {
      a.detail += "; every rank's local values were fine: no culprit";
    }
    reported_ = std::max(reported_, step);
    pending_.erase(pending_.begin(), std::next(it));
    return a;
  }
  return std::nullopt;
}

}  // namespace bulwark::controller
