#include "sim/heartbeats.h"

#include <algorithm>

namespace bulwark::sim {

using namespace controller;  // NOLINT: the simulator speaks the controller's vocabulary

void Heartbeats::Up(const MachineId& m, const std::string& domain, Time now) {
  detector_.Add(m);
  detector_.SetDomain(m, domain);
  detector_.HeardContinuously(m, now);
  bool& up = is_up_[m];
  if (!up) ++up_;
  up = true;
}

void Heartbeats::Down(const MachineId& m, Time now) {
  auto it = is_up_.find(m);
  if (it == is_up_.end() || !it->second) return;  // already silent
  it->second = false;
  --up_;
  detector_.Silent(m, LastBeat(m, now));
}

void Heartbeats::PeerClosed(const MachineId& m, Time at) {
  Time& t = closed_seen_[m];
  t = std::max(t, at);
}

Duration Heartbeats::PhaseOf(const MachineId& m) const {
  uint64_t h = 1469598103934665603ULL ^ (o_.seed * 0x9e3779b97f4a7c15ULL);
  for (const char c : m) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  return Duration(static_cast<int64_t>(h % static_cast<uint64_t>(std::max<int64_t>(1, o_.report_period.count()))));
}

Time Heartbeats::LastBeat(const MachineId& m, Time t) const {
  const int64_t p = std::max<int64_t>(1, o_.report_period.count());
  const int64_t since = ToMs(t) - PhaseOf(m).count();
  if (since < 0) return t;  // not a period in yet: heard at its registration
  return TimeFromMs(ToMs(t) - since % p);
}

Time Heartbeats::NextTick(Time now) const {
  const int64_t p = std::max<int64_t>(1, o_.tick_period.count());
  return TimeFromMs((ToMs(now) / p + 1) * p);
}

LivenessDetector::Verdict Heartbeats::Check(Time now, const ClusterState& state) {
  ++checks_;
  // The healthy agents' reports since the last check, one report period
  // apart each: the lease's samples (ReportGaps keeps 5 s of them).
  const Duration window = std::chrono::milliseconds(5000);
  const Time from = std::max(gaps_fed_, now - window);
  if (now > from && up_ > 0) {
    const int64_t reports = up_ * (now - from).count() / std::max<int64_t>(1, o_.report_period.count());
    if (reports > 0) detector_.AddGaps(now, o_.report_period, reports);
  }
  gaps_fed_ = now;
  LivenessDetector::CheckInput in;
  in.closed_seen = [this](const MachineId& m) -> std::optional<Time> {
    auto it = closed_seen_.find(m);
    if (it == closed_seen_.end()) return std::nullopt;
    return it->second;
  };
  LivenessDetector::Verdict v = detector_.Check(now, state, in);
  for (const LivenessDetector::Loss& l : v.alone) detector_.Lose(l.machine);
  return v;
}

}  // namespace bulwark::sim
