#include "controller/liveness_detector.h"

#include <algorithm>

namespace bulwark::controller {

// ---------------------------------------------------------------- the machines

void LivenessDetector::Add(const MachineId& m) {
  auto [it, fresh] = machines_.try_emplace(m);
  if (fresh) Reindex(it->first, it->second);
}

void LivenessDetector::Remove(const MachineId& m) {
  auto it = machines_.find(m);
  if (it == machines_.end()) return;
  it->second.lost = true;  // out of every index
  it->second.continuous = false;
  Reindex(it->first, it->second);
  machines_.erase(it);
}

void LivenessDetector::SetDomain(const MachineId& m, const std::string& domain) {
  auto it = machines_.find(m);
  if (it == machines_.end() || it->second.domain == domain) return;
  Machine& a = it->second;
  if (a.in_continuous && --continuous_in_[a.domain] == 0) continuous_in_.erase(a.domain);
  a.in_continuous = false;
  a.domain = domain;
  Reindex(it->first, a);
}

void LivenessDetector::Reindex(const MachineId& id, Machine& m) {
  const bool discrete = Discrete(m);
  if (discrete && !m.in_discrete) discrete_.emplace(std::string_view(id), &m);
  if (!discrete && m.in_discrete) discrete_.erase(std::string_view(id));
  m.in_discrete = discrete;
  const bool counted = !m.lost && m.continuous && !m.domain.empty();
  if (counted && !m.in_continuous) ++continuous_in_[m.domain];
  if (!counted && m.in_continuous && --continuous_in_[m.domain] == 0) continuous_in_.erase(m.domain);
  m.in_continuous = counted;
}

// ---------------------------------------------------------------- what was heard

void LivenessDetector::Heard(const MachineId& m, Time at, Time now) {
  auto it = machines_.find(m);
  if (it == machines_.end() || it->second.lost || it->second.continuous) return;
  Machine& a = it->second;
  const Time heard = std::min(at, now);
  if (a.on_lease && heard > a.last_heard) gaps_.Add(now, heard - a.last_heard);
  a.last_heard = std::max(a.last_heard, heard);
}

void LivenessDetector::HeardWaiting(const MachineId& m, Time now) {
  auto it = machines_.find(m);
  if (it == machines_.end() || it->second.lost) return;
  it->second.last_heard = std::max(it->second.last_heard, now);
}

bool LivenessDetector::Back(const MachineId& m, Time now) {
  auto it = machines_.try_emplace(m).first;
  Machine& a = it->second;
  const bool was_lost = a.lost;
  a.last_heard = now;
  a.on_lease = true;
  a.lost = false;
  Reindex(it->first, a);
  return was_lost;
}

void LivenessDetector::SetHeard(const MachineId& m, Time t) {
  Add(m);
  machines_[m].last_heard = t;
}

void LivenessDetector::AwaitBack(const MachineId& m) {
  Add(m);
  machines_[m].on_lease = false;
}

void LivenessDetector::HeardContinuously(const MachineId& m, Time now) {
  Back(m, now);
  Machine& a = machines_[m];
  a.continuous = true;
  Reindex(machines_.find(m)->first, a);
}

void LivenessDetector::Silent(const MachineId& m, Time last) {
  auto it = machines_.find(m);
  if (it == machines_.end() || !it->second.continuous) return;
  it->second.continuous = false;
  it->second.last_heard = last;
  Reindex(it->first, it->second);
}

// ---------------------------------------------------------------- time that is nobody's silence

void LivenessDetector::Credit(Time now, Duration d) {
  for (auto& [id, a] : machines_) a.last_heard = std::min(now, a.last_heard + d);
}

size_t LivenessDetector::HoldForReattach(Time since, const ClusterState& state) {
  size_t waiting = 0;
  for (auto& [id, a] : machines_) {
    if (a.on_lease || a.lost) continue;
    const MachineStatus* m = state.FindMachine(id);
    if (m == nullptr || m->state == MachineState::kEvicted) continue;  // nothing to lose
    ++waiting;
    a.last_heard = std::max(a.last_heard, since);
  }
  return waiting;
}

void LivenessDetector::StartLeasesAt(Time since) {
  for (auto& [id, a] : machines_) a.last_heard = std::max(a.last_heard, since);
}

// ---------------------------------------------------------------- what is known

bool LivenessDetector::Lost(const MachineId& m) const {
  auto it = machines_.find(m);
  return it != machines_.end() && it->second.lost;
}

bool LivenessDetector::OnLease(const MachineId& m) const {
  auto it = machines_.find(m);
  return it != machines_.end() && it->second.on_lease;
}

Time LivenessDetector::LastHeard(const MachineId& m, Time now) const {
  auto it = machines_.find(m);
  if (it == machines_.end()) return Time{};
  return it->second.continuous ? now : it->second.last_heard;
}

Duration LivenessDetector::Lease(Time now) const {
  return std::clamp<Duration>(2 * GapP99(now), options_.heartbeat_timeout,
                              std::max(options_.heartbeat_timeout, options_.reconnect_grace));
}

bool LivenessDetector::Watched(const ClusterState& state, const MachineId& id) {
  // An evicted machine's silence says nothing, unless it is out for its
  // checkup: still in its rack, its loss counts toward its switch's burst.
  const MachineStatus* m = state.FindMachine(id);
  return m != nullptr && !(m->state == MachineState::kEvicted && m->checkup == 0);
}

size_t LivenessDetector::Watching(const ClusterState& state) const {
  size_t n = 0;
  for (const auto& [id, a] : discrete_) n += Watched(state, MachineId(id)) ? 1 : 0;
  return n;
}

// ---------------------------------------------------------------- the decision

LivenessDetector::Verdict LivenessDetector::Check(Time now, const ClusterState& state, const CheckInput& in) {
  Verdict v;
  const Duration lease = Lease(now);
  v.lease = lease;
  const Time counted = in.counted.value_or(now);
  const Duration grace = options_.reconnect_grace;
  // A machine whose lease ended waits, kDomainSkew at most, for the silent
  // machines of its domain whose leases are ending: decided one by one, the
  // first would be replaced (a regroup that the next tick undoes) before
  // the burst is seen as one incident (policy_domains.cc).
  auto waits_for_domain = [&](std::string_view id, const Machine& a, Duration past_lease) {
    if (a.domain.empty() || past_lease > kDomainSkew) return false;
    auto ending = [&](Time heard) {
      const Duration silent = counted - heard;
      return silent <= lease && silent > lease - kDomainSkew;
    };
    for (const auto& [other, b] : discrete_) {
      if (other == id || b->domain != a.domain || b->lost) continue;
      if (ending(b->last_heard)) return true;
    }
    auto c = continuous_in_.find(a.domain);
    return c != continuous_in_.end() && c->second > 0 && ending(now);
  };
  struct Silence {
    Loss loss;
    Machine* m;
  };
  std::vector<Silence> silent;  // the others past their lease (closed: peers saw them go)
  std::vector<std::string_view> lost_with_domain;
  for (const auto& [id, a] : discrete_) {
    const Duration timeout = a->on_lease && !in.reattaching ? lease : grace;
    if (a->lost || counted - a->last_heard <= std::min(timeout, options_.closed_peer_timeout)) continue;
    const MachineId machine(id);
    // Within the lease only a machine whose peers saw its connections close
    // since it last spoke: it is down, not cut off, so nothing of it can
    // still run, and its slot need not wait for it to fence itself.
    const bool closed = counted - a->last_heard <= timeout;
    if (closed) {
      const std::optional<Time> seen = in.closed_seen ? in.closed_seen(machine) : std::nullopt;
      if (!seen || *seen <= a->last_heard) continue;
    }
    if (!Watched(state, machine)) continue;
    if (!closed && waits_for_domain(id, *a, counted - a->last_heard - timeout)) continue;
    if (!closed && !a->domain.empty()) {
      // Decided with the rest of its domain's; lost at once, so that its
      // domain's later machines do not wait for it.
      a->lost = true;
      lost_with_domain.push_back(id);
      v.with_domain.push_back(Loss{machine, a->last_heard, false, timeout});
      continue;
    }
    silent.push_back(Silence{Loss{machine, a->last_heard, closed, timeout}, a});
  }
  for (std::string_view id : lost_with_domain) {
    auto it = machines_.find(MachineId(id));
    Reindex(it->first, it->second);
  }

  const size_t mass = std::max<size_t>(kMassSilence, machines_.size() / 100);
  if (silent.size() > mass) {
    v.mass_silent = silent.size();
    mass_silence_at_ = now;
  }
  // A mass silence ends a few machines at a time as their reports get
  // through; its last stragglers, fewer than `mass`, are still of it, not
  // machines lost (issue 36: at 4,000 agents on a host at load 20, the
  // four that a mass silence left behind were evicted at the plain lease,
  // each with a report sent that the starved controller had not yet heard).
  // So a machine silent since before the latest mass silence keeps its
  // grace while that silence is recent.
  if (mass_silence_at_ && now - *mass_silence_at_ <= grace) {
    const Time since = *mass_silence_at_;
    silent.erase(std::remove_if(silent.begin(), silent.end(),
                                [&](const Silence& s) {
                                  const Time heard = s.m->last_heard;
                                  return heard <= since && now - heard <= grace;
                                }),
                 silent.end());
  }
  // The longest silent first; the rest wait for the next Check, which
  // counts the reports that arrived meanwhile.
  std::sort(silent.begin(), silent.end(),
            [](const Silence& x, const Silence& y) { return x.m->last_heard < y.m->last_heard; });
  if (silent.size() > kLostPerTick) silent.resize(kLostPerTick);
  for (Silence& s : silent) v.alone.push_back(std::move(s.loss));
  return v;
}

void LivenessDetector::Lose(const MachineId& m) {
  auto it = machines_.find(m);
  if (it == machines_.end()) return;
  it->second.lost = true;
  it->second.continuous = false;
  Reindex(it->first, it->second);
}

}  // namespace bulwark::controller
