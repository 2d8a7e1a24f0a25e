#include "sim/fault_stream.h"

#include <cmath>
#include <limits>

#include "controller/standby_pool.h"

namespace bulwark::sim {

uint64_t Rng::Next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

double Rng::Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

double Rng::Exponential(double rate) { return -std::log1p(-Uniform()) / rate; }

int Rng::Below(int n) { return static_cast<int>(Uniform() * n); }

int FaultStream::Racks(const SimConfig& c) {
  if (!c.domains.on()) return 0;
  int standbys = c.initial_standbys;
  if (standbys < 0) {
    Result<int> q = controller::BinomialQuantile(c.machines(), c.policy.daily_failure_rate, c.policy.standby_quantile);
    standbys = q.ok() ? *q : 0;
  }
  return (c.machines() + standbys + c.domains.rack_machines - 1) / c.domains.rack_machines;
}

FaultStream::FaultStream(const SimConfig& c)
    : horizon_(c.days * 86400.0), slots_(c.machines()), racks_(Racks(c)) {
  for (int i = 0; i <= kNumFaultClasses + 1; ++i) {
    Source& s = sources_[i];
    // One generator per class: changing one class's rate leaves the others'
    // faults where they were, so sweeps compare like with like.
    s.rng = Rng(c.seed * 1000003ULL + static_cast<uint64_t>(i) * 7919ULL + 1);
    const double per_day = i < kNumFaultClasses    ? c.rates.per_machine_day[i] * slots_
                           : i == kNumFaultClasses ? c.rates.manual_per_day
                                                   : c.domains.switch_per_rack_day * racks_;
    s.rate = c.script.empty() ? per_day / 86400.0 : 0.0;
    s.next = s.rate > 0 ? s.rng.Exponential(s.rate) : std::numeric_limits<double>::infinity();
  }
}

std::optional<Fault> FaultStream::Next() {
  int best = 0;
  for (int i = 1; i <= kNumFaultClasses + 1; ++i) {
    if (sources_[i].next < sources_[best].next) best = i;  // ties: lower class first
  }
  Source& s = sources_[best];
  if (!(s.next < horizon_)) return std::nullopt;
  Fault f;
  f.at = s.next;
  f.manual = best == kNumFaultClasses;
  if (best == kNumFaultClasses + 1) {
    f.cls = FaultClass::kHost;  // how each of its machines shows: its heartbeat stops
    f.rack = s.rng.Below(racks_);
    f.slot = -1;
  } else {
    f.cls = f.manual ? FaultClass::kSoftware : static_cast<FaultClass>(best);
    f.slot = f.manual ? 0 : s.rng.Below(slots_);
  }
  s.next += s.rng.Exponential(s.rate);
  return f;
}

}  // namespace bulwark::sim
