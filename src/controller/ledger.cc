#include "controller/ledger.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace bulwark::controller {

const char* TimeCategoryName(TimeCategory c) {
  switch (c) {
    case TimeCategory::kProductive: return "productive";
    case TimeCategory::kStartup: return "startup";
    case TimeCategory::kDetection: return "detection";
    case TimeCategory::kLocalization: return "localization";
    case TimeCategory::kRecovery: return "recovery";
    case TimeCategory::kRecomputation: return "recomputation";
    case TimeCategory::kWaiting: return "waiting";
    case TimeCategory::kManual: return "manual";
    case TimeCategory::kDegraded: return "degraded";
  }
  return "unknown";
}

double TimeBreakdown::ettr() const {
  if (wall.count() <= 0) return 0.0;
  return static_cast<double>(productive().count()) / static_cast<double>(wall.count());
}

Ledger::Ledger(Duration window) : window_(window) {}

void Ledger::Start(Time t) {
  if (started_) return;
  started_ = true;
  start_ = t;
  open_start_ = t;
  phase_ = TimeCategory::kStartup;
}

TimeCategory Ledger::OpenCategory() const {
  if (phase_) return *phase_;
  return last_step_ + 1 > high_water_ ? TimeCategory::kProductive : TimeCategory::kRecomputation;
}

void Ledger::Close(Time end, TimeCategory category) {
  if (end > open_start_) {
    const double share = category == TimeCategory::kProductive ? open_share_ : 1.0;
    Segment* last = segments_.empty() ? nullptr : &segments_.back();
    if (last != nullptr && last->category == category && last->end == open_start_ &&
        (last->share == share || (last->share < 1 && share < 1))) {
      // Merging keeps a steady job at one segment. Stretches below full
      // width merge at their time-weighted share, which keeps the totals.
      const double a = static_cast<double>((last->end - last->start).count());
      const double b = static_cast<double>((end - open_start_).count());
      last->share = (last->share * a + share * b) / (a + b);
      last->end = end;
    } else {
      segments_.push_back({open_start_, end, category, share});
    }
  }
  open_start_ = std::max(open_start_, end);
}

void Ledger::SetShare(double share) {
  share_ = std::clamp(share, 0.0, 1.0);
  open_share_ = share_;
}

// Called as `steps` new steps end a running stretch of `took`.
void Ledger::MeasurePace(int64_t steps, Duration took) {
  if (steps <= 0 || took.count() <= 0) return;
  const Duration per_step = took / steps;
  if (share_ >= 1) {
    paces_.push_back(per_step);
    if (paces_.size() > kPaces) paces_.pop_front();
    open_share_ = 1.0;
    return;
  }
  if (paces_.empty()) return;  // the replicas' share stands
  std::vector<Duration> sorted(paces_.begin(), paces_.end());
  std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
  const double full = static_cast<double>(sorted[sorted.size() / 2].count());
  open_share_ = std::clamp(full / static_cast<double>(per_step.count()), 0.0, 1.0);
}

void Ledger::StepCompleted(int64_t step, Time t) {
  if (!started_ || stopped_) return;
  if (t < open_start_) {
    // A late report of a step that finished before the current segment
    // began: it moves the step counters but cannot end a phase that started
    // after it.
    last_step_ = std::max(last_step_, step);
    high_water_ = std::max(high_water_, step);
    return;
  }
  if (phase_) {
    // The first step after startup, recovery or a manual restart ends that
    // phase; its own compute time is part of the phase.
    Close(t, *phase_);
    phase_.reset();
  } else if (step > high_water_) {
    MeasurePace(step - last_step_, t - open_start_);
    Close(t, TimeCategory::kProductive);
  } else {
    Close(t, TimeCategory::kRecomputation);
  }
  last_step_ = step;
  high_water_ = std::max(high_water_, step);
}

void Ledger::FaultDetected(std::optional<Time> fault_at, Time detected) {
  if (!started_ || stopped_) return;
  detected = Clamp(detected);
  Time fault = fault_at ? std::min(Clamp(*fault_at), detected) : detected;
  // While running, the step in flight at the fault is lost work.
  Close(fault, phase_ ? *phase_ : TimeCategory::kRecomputation);
  Close(detected, TimeCategory::kDetection);
  phase_ = TimeCategory::kLocalization;
}

Status Ledger::Enter(TimeCategory phase, Time t) {
  if (phase == TimeCategory::kProductive || phase == TimeCategory::kRecomputation ||
      phase == TimeCategory::kDetection) {
    return Status::InvalidArgument(std::string("ledger: ") + TimeCategoryName(phase) +
                                   " time comes from steps and faults, not from Enter");
  }
  if (!started_ || stopped_) {
    return Status::FailedPrecondition(std::string("ledger: cannot enter ") + TimeCategoryName(phase) +
                                      (started_ ? " after Stop" : " before Start"));
  }
  t = Clamp(t);
  Close(t, phase_ ? *phase_ : TimeCategory::kRecomputation);
  phase_ = phase;
  return Status::OK();
}

void Ledger::Stop(Time t) {
  if (!started_ || stopped_) return;
  t = Clamp(t);
  Close(t, phase_ ? *phase_ : TimeCategory::kRecomputation);
  stopped_ = true;
}

TimeBreakdown Ledger::Between(Time from, Time to) const {
  TimeBreakdown b;
  if (!started_) return b;
  from = std::max(from, start_);
  if (stopped_) to = std::min(to, open_start_);
  if (to <= from) return b;
  b.wall = to - from;
  auto add = [&](Time s, Time e, TimeCategory c, double share) {
    s = std::max(s, from);
    e = std::min(e, to);
    if (e <= s) return;
    const Duration d = e - s;
    const Duration part(static_cast<int64_t>(std::llround(static_cast<double>(d.count()) * share)));
    b.by_category[static_cast<int>(c)] += part;
    b.by_category[static_cast<int>(TimeCategory::kDegraded)] += d - part;
  };
  // Segments are sorted and contiguous: skip straight to the first that ends
  // after `from`, so a window query costs O(log n + segments in the window).
  auto it = std::upper_bound(segments_.begin(), segments_.end(), from,
                             [](Time t, const Segment& s) { return t < s.end; });
  for (; it != segments_.end() && it->start < to; ++it) add(it->start, it->end, it->category, it->share);
  if (!stopped_) {
    const TimeCategory open = OpenCategory();
    add(open_start_, to, open, open == TimeCategory::kProductive ? open_share_ : 1.0);
  }
  return b;
}

TimeBreakdown Ledger::Cumulative(Time now) const { return Between(start_, now); }

TimeBreakdown Ledger::Window(Time now) const { return Between(now - window_, now); }

std::vector<LedgerSegment> Ledger::Timeline(Time now) const {
  std::vector<LedgerSegment> out = segments_;
  if (started_ && !stopped_ && now > open_start_) {
    const TimeCategory open = OpenCategory();
    out.push_back({open_start_, now, open, open == TimeCategory::kProductive ? open_share_ : 1.0});
  }
  return out;
}

}  // namespace bulwark::controller
