// Liveness: when an agent was last heard (a report's arrival or its
// answer), and the tick that finds the machines whose silence ran past
// their lease, the one fault no agent can report.
#include <algorithm>

#include "controller/policy.h"
#include "plane/plane.h"

namespace bulwark::plane {

void Plane::AbsorbArrivalsLocked(Time now) {
  // Reports that arrived since, processed or not yet.
  std::unordered_map<std::string, std::pair<int64_t, Time>> arrived;
  std::vector<std::pair<std::string, int64_t>> waiting;  // a report of theirs is in our hands
  {
    MutexLock heard(&heard_mu_);
    arrived.swap(heard_);
    for (const auto& [id, f] : in_flight_) {
      if (now - f.since <= options_.reconnect_grace) waiting.push_back({id, f.incarnation});
    }
  }
  // Heard now, with no gap sample: the wait is ours, not the agent's pace.
  for (const auto& [id, incarnation] : waiting) {
    auto it = agents_.find(id);
    if (it == agents_.end() || it->second.lost_reported || it->second.incarnation != incarnation) continue;
    it->second.last_heard = std::max(it->second.last_heard, now);
  }
  for (const auto& [id, at] : arrived) {
    auto it = agents_.find(id);
    if (it == agents_.end() || it->second.lost_reported || it->second.incarnation != at.first) continue;
    Agent& a = it->second;
    const Time heard = std::min(at.second, now);
    if (a.heard_since_start && heard > a.last_heard) gaps_.Add(now, heard - a.last_heard);
    a.last_heard = std::max(a.last_heard, heard);
  }
}

Duration Plane::LeaseLocked(Time now) {
  const Duration p99 = gaps_.Quantile(now, 0.99, kMinGapSamples);
  const Duration lease = std::clamp<Duration>(2 * p99, options_.heartbeat_timeout,
                                              std::max(options_.heartbeat_timeout, options_.reconnect_grace));
  const Duration moved = lease > lease_logged_ ? lease - lease_logged_ : lease_logged_ - lease;
  if (moved >= std::chrono::milliseconds(500)) {
    LogLocked("lease " + FormatDuration(lease) + ": the agents' reports were heard up to " + FormatDuration(p99) +
              " apart (99th percentile, last 5 s; configured " + FormatDuration(options_.heartbeat_timeout) + ")");
    lease_logged_ = lease;
  }
  return lease;
}

void Plane::Serving(Time now) {
  PlaneLock lock(this);
  now = NowLocked(now);
  serving_at_ = now;
  if (reattach_at_) reattach_at_ = std::max(*reattach_at_, now);
  if (replayed_hold_) replayed_hold_->since = std::max(replayed_hold_->since, now);
}

bool Plane::HeldLocked(const wire::Command& c) const {
  return replayed_hold_ && c.kind() == wire::Command::START_RANKS && c.restore_from_size() == 0 &&
         !c.fresh_machines() && c.generation() == replayed_hold_->generation;
}

// Without the hold, the machine whose stream came first got the sources
// known by then: a standby in an evicted machine's slot, served before the
// backup peer of that slot had reported, restored from durable storage
// (docs/control-plane.md, "Not yet", until 2026-11-28), and so did the
// whole job with it.
void Plane::HoldReplayedStartsLocked(Time now) {
  if (!replayed_hold_) return;
  bool waiting = false, held = false;
  for (const MachineId& m : controller_->state().placement.slots) {
    auto it = agents_.find(m);
    if (it == agents_.end()) continue;
    const Agent& a = it->second;
    waiting = waiting || (!a.reported && !a.lost_reported);
    held = held || (a.desired && HeldLocked(*a.desired));
  }
  const bool expired = now - replayed_hold_->since > options_.reconnect_grace;
  if (held && waiting && !expired) return;
  if (held) {
    LogLocked(waiting ? "the replayed restart goes out without every machine's holdings: not all of the job's "
                        "machines reported within " + FormatDuration(options_.reconnect_grace)
                      : "the replayed restart goes out with every machine's holdings");
  }
  replayed_hold_.reset();
  WakeStreamsLocked();
}

Status Plane::Handover(const wire::RegisterRequest& req, Time now) {
  BULWARK_RETURN_IF_ERROR(Register(req, now));
  PlaneLock lock(this);
  now = NowLocked(now);
  agents_[req.machine()].heard_since_start = false;
  reattach_at_ = std::max(reattach_at_.value_or(now), now);
  return Status::OK();
}

void Plane::BackLocked(Agent& a, Time now) {
  if (!a.heard_since_start && reattach_at_) reattach_at_ = std::max(*reattach_at_, now);
  a.last_heard = now;
  a.heard_since_start = true;
}

bool Plane::ReattachingLocked(Time now) {
  if (!reattach_at_) return false;
  size_t waiting = 0;
  for (auto& [id, a] : agents_) {
    if (a.heard_since_start || a.lost_reported) continue;
    const MachineStatus* m = controller_->state().FindMachine(id);
    if (m == nullptr || m->state == MachineState::kEvicted) continue;  // nothing to lose
    ++waiting;
    a.last_heard = std::max(a.last_heard, *reattach_at_);
  }
  if (waiting > 0) return now - *reattach_at_ <= options_.reconnect_grace;
  // Every lease starts afresh when the last agent came back: those back
  // first, whose next reports may still queue behind the last ones'
  // registrations, are not held to 2 s of a silence the re-attach caused
  // (at 12,500 agents in 100 jobs, 33 were lost 2.0-2.2 s silent at the
  // ends of their jobs' re-attaches).
  for (auto& [id, a] : agents_) a.last_heard = std::max(a.last_heard, *reattach_at_);
  LogLocked(serving_at_ ? "re-attach over: the last agent came back " +
                              FormatDuration(*reattach_at_ - *serving_at_) + " after this controller began serving"
                        : std::string("every machine handed to this plane has reported"));
  reattach_at_.reset();
  return false;
}

void Plane::Heard(const std::string& machine, int64_t incarnation, Time now) {
  MutexLock lock(&heard_mu_);
  auto& at = heard_[machine];
  if (at.first != incarnation || at.second < now) at = {incarnation, now};
}

void Plane::Arrived(const std::string& machine, int64_t incarnation, Time now) {
  Heard(machine, incarnation, now);
  MutexLock lock(&heard_mu_);
  InFlight& f = in_flight_[machine];
  if (f.incarnation != incarnation || f.count == 0) f = {incarnation, 0, now};
  ++f.count;
}

void Plane::Answered(const std::string& machine, int64_t incarnation, Time now) {
  Heard(machine, incarnation, now);
  MutexLock lock(&heard_mu_);
  auto it = in_flight_.find(machine);
  if (it == in_flight_.end() || it->second.incarnation != incarnation) return;
  if (--it->second.count <= 0) in_flight_.erase(it);
}

std::vector<std::pair<MachineId, bool>> Plane::LostOfSilentLocked(std::vector<std::pair<MachineId, bool>> silent,
                                                                 Time now) {
  const size_t mass = std::max<size_t>(kMassSilence, agents_.size() / 100);
  if (silent.size() > mass) {
    LogLocked(std::to_string(silent.size()) + " of " + std::to_string(agents_.size()) + " machines silent at once: more " +
        "likely this controller's own lag than that many machines lost; each is lost only after " +
        FormatDuration(options_.reconnect_grace) + " of silence");
    mass_silence_at_ = now;
  }
  // A mass silence ends a few machines at a time as their reports get
  // through; its last stragglers, fewer than `mass`, are still of it, not
  // machines lost (issue 36: at 4,000 agents on a host at load 20, the
  // four that a mass silence left behind were evicted at the plain lease,
  // each with a report sent that the starved controller had not yet heard).
  // So a machine silent since before the latest mass silence keeps its
  // grace while that silence is recent.
  if (mass_silence_at_ && now - *mass_silence_at_ <= options_.reconnect_grace) {
    const Time since = *mass_silence_at_;
    silent.erase(std::remove_if(silent.begin(), silent.end(),
                                [&](const auto& s) REQUIRES(mu_) {
                                  const Time heard = agents_[s.first].last_heard;
                                  return heard <= since && now - heard <= options_.reconnect_grace;
                                }),
                 silent.end());
  }
  // The longest silent first; the rest wait for the next tick, which counts
  // the reports that arrived meanwhile.
  std::sort(silent.begin(), silent.end(),
            [&](const auto& x, const auto& y) REQUIRES(mu_) {
              return agents_[x.first].last_heard < agents_[y.first].last_heard;
            });
  if (silent.size() > kLostPerTick) silent.resize(kLostPerTick);
  return silent;
}

void Plane::CreditSilenceLocked(Time now, Duration d) {
  for (auto& [id, a] : agents_) a.last_heard = std::min(now, a.last_heard + d);
}

void Plane::Tick(Time now) {
  PlaneLock lock(this, /*first=*/true);
  now = NowLocked(now);
  if (last_tick_ && now - *last_tick_ > 4 * options_.tick_period) {
    const Duration stall = now - *last_tick_ - options_.tick_period;
    CreditSilenceLocked(now, stall);
    monitors_->Stalled(now, stall);
    LogLocked("no tick for " + FormatDuration(now - *last_tick_) + " (this process stalled); agents' silence in that "
        "time is not counted against them");
  }
  last_tick_ = now;
  AbsorbArrivalsLocked(now);
  if (!controller_ || done_step_) return;
  const Duration lease = LeaseLocked(now);
  const bool reattaching = ReattachingLocked(now);
  HoldReplayedStartsLocked(now);
  // A switch takes its rack's machines at once, but their last reports
  // differ by up to a report period, so their leases end a tick or two
  // apart; decided one by one, the first would be replaced (a regroup that
  // the next tick undoes) before the burst is seen as one incident
  // (policy_domains.cc). A machine whose lease ended waits, kDomainSkew at
  // most, for the silent machines of its domain whose leases are ending.
  constexpr Duration kDomainSkew = std::chrono::milliseconds(1000);
  // While a large stack capture is in flight, silence counts up to its
  // start only: FinishTraceLocked says why, and credits its time after.
  const Time counted = trace_ && trace_->crowds ? std::min(now, trace_->started) : now;
  auto waits_for_domain = [&](const std::string& id, const Agent& a, Duration past_lease) REQUIRES(mu_) {
    if (a.domain.empty() || past_lease > kDomainSkew) return false;
    for (const auto& [other, b] : agents_) {
      if (other == id || b.domain != a.domain || b.lost_reported) continue;
      const Duration silent = counted - b.last_heard;
      if (silent <= lease && silent > lease - kDomainSkew) return true;
    }
    return false;
  };
  std::vector<Event> with_domain;  // losses of machines with a domain, decided together
  std::vector<std::pair<MachineId, bool>> silent;  // the others past their lease (closed: peers saw them go)
  std::optional<std::unordered_map<MachineId, Time>> closed_seen;  // built once, when a silent machine needs it
  for (auto& [id, a] : agents_) {
    const Duration timeout = a.heard_since_start && !reattaching ? lease : options_.reconnect_grace;
    if (a.lost_reported || counted - a.last_heard <= std::min(timeout, options_.closed_peer_timeout)) continue;
    // Within the lease only a machine whose peers saw its connections close
    // since it last spoke: it is down, not cut off, so nothing of it can
    // still run, and its slot need not wait for it to fence itself.
    const bool closed = counted - a.last_heard <= timeout;
    if (closed) {
      if (!closed_seen) closed_seen = ClosedSeenLocked();
      auto seen = closed_seen->find(id);
      if (seen == closed_seen->end() || seen->second <= a.last_heard) continue;
    }
    const MachineStatus* m = controller_->state().FindMachine(id);
    // An evicted machine's silence says nothing, unless it is out for its
    // checkup: still in its rack, its loss counts toward its switch's burst.
    if (m == nullptr || (m->state == MachineState::kEvicted && m->checkup == 0)) continue;
    if (!closed && waits_for_domain(id, a, counted - a.last_heard - timeout)) continue;
    if (!closed && !a.domain.empty()) {
      // Decided with the rest of its domain's, after the loop.
      a.lost_reported = true;
      if (!a.shards.empty()) RoutesChangedLocked();
      with_domain.push_back(MachineHeartbeatLost{id, a.last_heard, now});
      continue;
    }
    silent.push_back({id, closed});
  }
  for (const auto& [id, closed] : LostOfSilentLocked(silent, now)) {
    Agent& a = agents_[id];
    if (closed) {
      LogLocked("machine " + id + " silent for " + FormatDuration(now - a.last_heard) +
          " and its peers saw its connections close: down, not cut off; not waiting out the lease");
    }
    a.lost_reported = true;
    if (!a.shards.empty()) RoutesChangedLocked();  // its copies are no longer offered
    FeedLocked(MachineHeartbeatLost{id, a.last_heard, now}, now, nullptr);
  }
  FeedAllLocked(with_domain, now);
  if (trace_ && now >= trace_->deadline) FinishTraceLocked(now);
  // The ladder's rung in flight ran past its budget: the results so far decide.
  const LadderStatus& ladder = controller_->state().ladder;
  if (ladder.deadline && now >= *ladder.deadline && journal_error_.ok()) {
    FeedLocked(LadderDeadline{ladder.incident, now}, now, nullptr);
  }
  if (journal_error_.ok() && AlignmentCheckIsDue(controller_->state(), options_.policy.ladder, now)) {
    FeedLocked(AlignmentCheckDue{now}, now, nullptr);
  }
  ReleaseAndRequeueTimersLocked(now);
  CheckMonitorsLocked(now);
}

}  // namespace bulwark::plane
