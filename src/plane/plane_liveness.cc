// Liveness: when an agent was last heard (a report's arrival or its
// answer), fed to the core's LivenessDetector, and the tick that acts on
// the machines it finds lost (controller/liveness_detector.h has the rules).
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
    if (it == agents_.end() || it->second.incarnation != incarnation) continue;
    liveness_.HeardWaiting(id, now);
  }
  for (const auto& [id, at] : arrived) {
    auto it = agents_.find(id);
    if (it == agents_.end() || it->second.incarnation != at.first) continue;
    liveness_.Heard(id, at.second, now);
  }
}

Duration Plane::LeaseLocked(Time now) {
  const Duration p99 = liveness_.GapP99(now);
  const Duration lease = liveness_.Lease(now);
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
    waiting = waiting || (!a.reported && !LostLocked(m));
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
  liveness_.AwaitBack(req.machine());
  reattach_at_ = std::max(reattach_at_.value_or(now), now);
  return Status::OK();
}

bool Plane::BackLocked(const std::string& machine, Time now) {
  if (!liveness_.OnLease(machine) && reattach_at_) reattach_at_ = std::max(*reattach_at_, now);
  return liveness_.Back(machine, now);
}

bool Plane::ReattachingLocked(Time now) {
  if (!reattach_at_) return false;
  const size_t waiting = liveness_.HoldForReattach(*reattach_at_, controller_->state());
  if (waiting > 0) return now - *reattach_at_ <= options_.reconnect_grace;
  // Every lease starts afresh when the last agent came back: those back
  // first, whose next reports may still queue behind the last ones'
  // registrations, are not held to 2 s of a silence the re-attach caused
  // (at 12,500 agents in 100 jobs, 33 were lost 2.0-2.2 s silent at the
  // ends of their jobs' re-attaches).
  liveness_.StartLeasesAt(*reattach_at_);
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

void Plane::CreditSilenceLocked(Time now, Duration d) {
  liveness_.Credit(now, d);
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
  // While a large stack capture is in flight, silence counts up to its
  // start only: FinishTraceLocked says why, and credits its time after.
  LivenessDetector::CheckInput in;
  in.counted = trace_ && trace_->crowds ? std::min(now, trace_->started) : now;
  in.reattaching = reattaching;
  std::optional<std::unordered_map<MachineId, Time>> closed_seen;  // built once, when a silent machine needs it
  in.closed_seen = [&](const MachineId& id) REQUIRES(mu_) -> std::optional<Time> {
    if (!closed_seen) closed_seen = ClosedSeenLocked();
    auto seen = closed_seen->find(id);
    if (seen == closed_seen->end()) return std::nullopt;
    return seen->second;
  };
  const LivenessDetector::Verdict lost = liveness_.Check(now, controller_->state(), in);
  // Losses of machines with a domain, decided together (policy_domains.cc)
  // after the others; already lost, so their copies are no longer offered.
  std::vector<Event> with_domain;
  for (const LivenessDetector::Loss& l : lost.with_domain) {
    if (!AgentForLocked(l.machine).shards.empty()) RoutesChangedLocked();
    with_domain.push_back(MachineHeartbeatLost{l.machine, l.last_heard, now});
  }
  if (lost.mass_silent > 0) {
    LogLocked(std::to_string(lost.mass_silent) + " of " + std::to_string(agents_.size()) + " machines silent at once: " +
        "more likely this controller's own lag than that many machines lost; each is lost only after " +
        FormatDuration(options_.reconnect_grace) + " of silence");
  }
  for (const LivenessDetector::Loss& l : lost.alone) {
    if (l.closed) {
      LogLocked("machine " + l.machine + " silent for " + FormatDuration(now - l.last_heard) +
          " and its peers saw its connections close: down, not cut off; not waiting out the lease");
    }
    liveness_.Lose(l.machine);
    if (!AgentForLocked(l.machine).shards.empty()) RoutesChangedLocked();  // its copies are no longer offered
    FeedLocked(MachineHeartbeatLost{l.machine, l.last_heard, now}, now, nullptr);
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
