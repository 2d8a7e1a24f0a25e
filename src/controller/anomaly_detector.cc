#include "controller/anomaly_detector.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace bulwark::controller {
namespace {

std::string Num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", x);
  return buf;
}

}  // namespace

bool AnomalyDetector::IsSpike(double value, const std::deque<double>& history, double factor, int min_history) {
  const int n = static_cast<int>(history.size());
  SpikeHistory h(std::max(n, 1));
  for (double v : history) h.Add(v);
  return h.Spike(value, SpikeRule{factor, std::max(n, 1), min_history});
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
  steps_.push_back(s.step);
  loss_.Add(s.loss);
  grad_norm_.Add(s.grad_norm);
  while (static_cast<int>(steps_.size()) > loss_.size()) steps_.pop_front();
}

// A job restarted from the state after step first-1 redoes the steps from
// `first` on: their values in the history are not its past. A restart from
// memory drops a step or none; one from step 0 (a job with no checkpoint)
// drops them all, so its first, high losses are not spikes against the
// late-training median.
void AnomalyDetector::Rewind(int64_t first) {
  while (!steps_.empty() && steps_.back() >= first) {
    loss_.PopBack();
    grad_norm_.PopBack();
    steps_.pop_back();
  }
  history_step_ = std::min(history_step_, first - 1);
}

void AnomalyDetector::Observe(const RankSignal& s) {
  if (!armed_) return;
  if (rewind_) {
    rewind_ = false;
    Rewind(s.step);
  }
  if (s.step <= reported_) return;
  const bool nonfinite = s.nonfinite || s.local_nonfinite || !std::isfinite(s.loss) || !std::isfinite(s.grad_norm);
  const SpikeRule rule = config_.spike_rule();
  const bool spike = !nonfinite && (loss_.Spike(s.loss, rule) || grad_norm_.Spike(s.grad_norm, rule));
  const bool anomalous = nonfinite || spike || !s.halted.empty();
  if (!anomalous && pending_.count(s.step) == 0) {
    // An ordinary step: history, and kept a little while in case another
    // rank reports this step as anomalous (its report then shows this
    // rank's local values were fine).
    Remember(s);
    if (s.steps == 1) recent_[s.step].push_back(s);
    while (recent_.size() > 8) recent_.erase(recent_.begin());
    return;
  }
  Pending& p = pending_[s.step];
  if (p.reports.empty()) {
    p.first_seen = s.observed;
    auto it = recent_.find(s.step);
    // A rank's later report of the step replaces its earlier one.
    if (it != recent_.end()) for (const RankSignal& r : it->second) p.reports[r.rank] = r;
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
    if (p.kind == "spike" && loss_.size() > 0) {
      a.detail += "; rolling medians " + Num(loss_.Median()) + " and " + Num(grad_norm_.Median());
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
