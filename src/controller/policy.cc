#include "controller/policy.h"

#include <algorithm>
#include <set>

#include "controller/echo.h"
#include "controller/policy_internal.h"
#include "controller/reconcile.h"

namespace bulwark::controller {
namespace {

using namespace internal;

using internal::EnterLadder;
using internal::OnDiagnosticsReported;
using internal::OnLadderDeadline;
using internal::OnAlignmentCheckDue;
using internal::OverEvict;
using internal::OnReleaseCreated;
using internal::OnRollbackRequested;
using internal::OnReleaseDue;
using internal::OnRequeueDue;
using internal::OnReleaseStaged;
using internal::OnStageDue;
using internal::RollBackAfterCrash;
using internal::EvictForFault;
using internal::StopJob;
using internal::OnSoftwareCrash;
using internal::EvictUnreachablePeer;

// ---------------------------------------------------------------------------
// Rules, one per event kind
// ---------------------------------------------------------------------------

Status OnRankExited(RuleContext& ctx, const Event& e) {
  const auto& x = std::get<RankExited>(e);
  if (ctx.state.FindMachine(x.machine) == nullptr) {
    return Status::NotFound("machine " + x.machine + " is not known to the controller");
  }
  // A clean exit is no fault; the job's completion is reported on its own.
  if (x.exit_code == 0 && x.signal == 0) return Status::OK();
  // A hardware signature condemns the machine whenever it was seen, so
  // unlike a software crash it is never dismissed as stale.
  if (ctx.config.hardware_signatures.count(x.log_signature) != 0) {
    return EvictForFault(ctx, x.machine, Describe(e), FaultTimeOf(e));
  }
  // A peer lost to a switch that took its rack down is the domain's
  // incident, not a crash of this machine's (policy_domains.cc).
  if (DomainEcho(ctx, x)) return Status::OK();
  Result<bool> blamed = EvictUnreachablePeer(ctx, x, Describe(e));
  if (!blamed.ok() || *blamed) return blamed.status();
  return OnSoftwareCrash(ctx, x.machine, x.log_signature, x.exit_code, x.observed, Describe(e));
}

Status OnHeartbeatLost(RuleContext& ctx, const Event& e) {
  const auto& x = std::get<MachineHeartbeatLost>(e);
  // One of a burst of losses in its domain: the domain's incident.
  Result<bool> domain = DomainMachineLost(ctx, x, Describe(e));
  if (!domain.ok() || *domain) return domain.status();
  return EvictForFault(ctx, x.machine, Describe(e), FaultTimeOf(e));
}

Status OnInspectionFailed(RuleContext& ctx, const Event& e) {
  const auto& x = std::get<InspectionFailed>(e);
  if (ctx.config.evicting_inspections.count(x.kind) != 0) {
    return EvictForFault(ctx, x.machine, Describe(e), FaultTimeOf(e));
  }
  return OnSoftwareCrash(ctx, x.machine, std::string(InspectionKindName(x.kind)) + "_inspection",
                         /*exit_code=*/0, x.observed, Describe(e));
}

// NIC flaps usually heal within seconds; only a repeat within the window
// says the NIC or its link is bad.
Status OnNetworkAlert(RuleContext& ctx, const Event& e) {
  const auto& x = std::get<NetworkAlert>(e);
  MachineStatus* m = ctx.state.FindMachine(x.machine);
  if (m == nullptr) return Status::NotFound("machine " + x.machine + " is not known to the controller");
  if (m->state == MachineState::kEvicted) return Status::OK();
  PruneBefore(m->network_alerts, x.observed - ctx.config.network_alert_window);
  // The same alert delivered twice is one alert.
  if (std::find(m->network_alerts.begin(), m->network_alerts.end(), x.observed) !=
      m->network_alerts.end()) {
    return Status::OK();
  }
  InsertSorted(m->network_alerts, x.observed);
  if (static_cast<int>(m->network_alerts.size()) < ctx.config.network_alerts_to_evict) {
    return Status::OK();  // recorded and tolerated
  }
  const Time first = m->network_alerts.front();
  return EvictForFault(ctx, x.machine,
                       std::to_string(m->network_alerts.size()) + " network alerts on " + x.machine +
                           " within " + FormatDuration(ctx.config.network_alert_window) +
                           (x.detail.empty() ? "" : ": " + x.detail),
                       first);
}

Status OnMachineJoined(RuleContext& ctx, const Event& e) {
  const auto& x = std::get<MachineJoined>(e);
  MachineStatus* m = ctx.state.FindMachine(x.machine);
  if (m == nullptr) {
    Result<MachineStatus*> added = AddMachine(ctx.state, x.machine, ctx.now);
    if (!added.ok()) return added.status();
    m = *added;
  }
  if (!x.domain.empty()) m->domain = x.domain;
  // A machine its switch took down comes back on its own (policy_domains.cc).
  Result<bool> returned = DomainReturn(ctx, *m, x);
  if (!returned.ok() || *returned) return returned.status();
  switch (m->state) {
    case MachineState::kEvicted:
      return Status::FailedPrecondition("machine " + x.machine + " is evicted (" + m->last_reason +
                                        "); it rejoins only after an operator returns it");
    case MachineState::kJoining:
      if (x.self_check_passed) {
        return SetMachineState(ctx.state, x.machine, MachineState::kStandby, ctx.now,
                               "self-check passed");
      }
      break;
    default:
      if (x.self_check_passed) return Status::OK();  // already serving: a repeated join
      break;
  }
  // A failed self-check keeps the machine out of the pool, and out of the
  // fleet until an operator has looked at it.
  return EvictForFault(ctx, x.machine, Describe(e), std::nullopt);
}

Status OnStepCompleted(RuleContext& ctx, const Event& e) {
  const auto& x = std::get<StepCompleted>(e);
  ClusterState& s = ctx.state;
  if (!RanksAreLive(s.job)) return Status::OK();
  if (s.last_restart_at && x.observed <= *s.last_restart_at) return Status::OK();  // the old run's
  // Reports that trail the ladder's stop come from ranks it stopped: no
  // progress, and they must not end the incident it is diagnosing.
  if (LadderHoldsJob(s)) return Status::OK();
  s.last_step = x.step;
  s.furthest_step = std::max(s.furthest_step, x.step);
  s.last_progress_at = x.observed;
  // A step past an implicit eviction's step completed: that fault did not
  // follow the job there (fail-slow has no step; it stays on record).
  s.implicit_evictions.erase(std::remove_if(s.implicit_evictions.begin(), s.implicit_evictions.end(),
                                            [&](const ClusterState::ImplicitEviction& e) {
                                              return e.kind != "slow" && e.step <= x.step;
                                            }),
                             s.implicit_evictions.end());
  s.ledger.StepCompleted(x.step, x.observed);
  if (!s.align_check_from) s.align_check_from = x.observed;  // the periodic check's clock starts with training
  if (s.ladder.state == LadderState::kWatching && x.step > s.ladder.trigger_step + ctx.config.ladder.settle_steps) {
    BULWARK_RETURN_IF_ERROR(s.ladder.Move(LadderInput::kSettled));
  }
  if (s.job != JobState::kRestarting) return Status::OK();
  // The first step after a restart: the job is back, the episode is over,
  // and the restart budget is renewed (progress, not count, bounds restarts).
  BULWARK_RETURN_IF_ERROR(SetJobState(s, JobState::kRunning, ctx.now));
  ++s.progress_epoch;
  s.rollback_to.reset();  // done: the restored run has stepped
  if (s.rejoin_pending) {
    s.incidents.Rejoined(x.observed);
    s.rejoin_pending = false;
  }
  if (Incident* inc = s.incidents.Current()) {
    inc->recovered = x.observed;
    // The fallback when the ranks did not say what they restored: a job
    // restored from step k completes k+1 first.
    if (!inc->restore_ms) inc->restored_step = x.step - 1;
    inc->closed = true;
  }
  return Status::OK();
}

Status OnCheckpointSaved(RuleContext& ctx, const Event& e) {
  const auto& x = std::get<CheckpointSaved>(e);
  // The latest report wins, not the highest: after a restore the job saves
  // lower steps again, and a copy above them may have died with a machine.
  ctx.state.checkpoint_step = x.step;
  return Status::OK();
}

// The ranks report what they restored, normally before their first step;
// the report may still trail it (the step came from another agent), so a
// recovered incident that heard no restore yet takes it too. A restore seen
// before the latest restart belongs to ranks since restarted again.
Status OnCheckpointRestored(RuleContext& ctx, const Event& e) {
  const auto& x = std::get<CheckpointRestored>(e);
  ClusterState& s = ctx.state;
  if (!RanksAreLive(s.job)) return Status::OK();
  if (s.last_restart_at && x.observed <= *s.last_restart_at) return Status::OK();
  s.restored_generation = s.placement.generation;  // crashes from now on are at a step
  Incident* inc = s.incidents.Current();
  if (inc == nullptr) {
    Incident* last = s.incidents.Last();
    if (last != nullptr && last->recovered && !last->restore_ms) inc = last;
  }
  if (inc == nullptr) return Status::OK();  // the job's first start: no episode to account
  inc->restored_step = x.step;
  inc->restore_source = x.source;
  inc->restore_ms = x.restore_ms;
  // The controller learns steps through lagging reports; a checkpoint of a
  // later step proves the job got that far before the fault.
  inc->step_at_fault = std::max(inc->step_at_fault, x.newest_step);
  return Status::OK();
}

Status OnOperatorReturned(RuleContext& ctx, const Event& e) {
  const auto& x = std::get<OperatorReturned>(e);
  MachineStatus* m = ctx.state.FindMachine(x.machine);
  if (m == nullptr) return Status::NotFound("machine " + x.machine + " is not known to the controller");
  if (m->state != MachineState::kEvicted) {
    return Status::FailedPrecondition("machine " + x.machine + " is " + MachineStateName(m->state) +
                                      ", not evicted; only evicted machines are returned");
  }
  // Repaired: its old flaps and crashes say nothing about it any more.
  m->network_alerts.clear();
  m->crashes.clear();
  m->lost_with_domain = false;
  SetCheckup(ctx.state, *m, 0);
  // The operator's return of a flapping switch's machine ends its domain's loss.
  if (auto d = ctx.state.domains.find(m->domain); d != ctx.state.domains.end() && d->second.down) {
    d->second.lost.erase(m->id);
    if (d->second.lost.empty()) {
      SetDomainDown(ctx.state, d->second, false);
      d->second.returned_at = ctx.now;
      d->second.recent.clear();
    }
  }
  return SetMachineState(ctx.state, x.machine, MachineState::kJoining, ctx.now,
                         "returned by an operator; awaiting its self-check");
}

// Only a standby's answer counts: a machine placed since (or evicted) has
// no spare to offer, and its next turn as a standby asks again.
Status OnStandbyReady(RuleContext& ctx, const Event& e) {
  const auto& x = std::get<StandbyReady>(e);
  if (ctx.state.standbys.count(x.machine) != 0) ctx.state.ready_standbys.insert(x.machine);
  return Status::OK();
}

Status OnManualRestart(RuleContext& ctx, const Event& e) {
  const auto& x = std::get<ManualRestart>(e);
  if (!RanksAreLive(ctx.state.job)) {
    return Status::FailedPrecondition(std::string("job is ") + JobStateName(ctx.state.job) +
                                      ": there are no running ranks to restart");
  }
  Result<Incident*> inc = OpenIncident(ctx, IncidentClass::kManual, "manual restart: " + x.reason,
                                       std::nullopt);
  if (!inc.ok()) return inc.status();
  (*inc)->resolution = Resolution::kReattempt;
  (*inc)->why = "restart in place, as the operator asked";
  ctx.state.restart_pending = true;
  ctx.state.restart_reason = "manual: " + x.reason;
  return Status::OK();
}


// The rule table, indexed by EventKind. Order is checked at compile time.
constexpr std::array<RuleEntry, kNumEventKinds> kRules = {{
    {EventKind::kRankExited, OnRankExited},
    {EventKind::kMachineHeartbeatLost, OnHeartbeatLost},
    {EventKind::kInspectionFailed, OnInspectionFailed},
    {EventKind::kNetworkAlert, OnNetworkAlert},
    {EventKind::kMachineJoined, OnMachineJoined},
    {EventKind::kStepCompleted, OnStepCompleted},
    {EventKind::kCheckpointSaved, OnCheckpointSaved},
    {EventKind::kOperatorReturned, OnOperatorReturned},
    {EventKind::kManualRestart, OnManualRestart},
    {EventKind::kCheckpointRestored, OnCheckpointRestored},
    {EventKind::kHangSuspected, OnHangSuspected},
    {EventKind::kFailSlowSuspected, OnFailSlowSuspected},
    {EventKind::kTrainingAnomaly, OnTrainingAnomaly},
    {EventKind::kStacksAnalyzed, OnStacksAnalyzed},
    {EventKind::kDiagnosticsReported, OnDiagnosticsReported},
    {EventKind::kLadderDeadline, OnLadderDeadline},
    {EventKind::kReleaseCreated, OnReleaseCreated},
    {EventKind::kRollbackRequested, OnRollbackRequested},
    {EventKind::kReleaseDue, OnReleaseDue},
    {EventKind::kRequeueDue, OnRequeueDue},
    {EventKind::kAlignmentCheckDue, OnAlignmentCheckDue},
    {EventKind::kReleaseStaged, OnReleaseStaged},
    {EventKind::kStageDue, OnStageDue},
    {EventKind::kStandbyReady, OnStandbyReady},
}};

constexpr bool RulesInEventOrder() {
  for (int i = 0; i < kNumEventKinds; ++i) {
    if (static_cast<int>(kRules[i].kind) != i || kRules[i].rule == nullptr) return false;
  }
  return true;
}
static_assert(RulesInEventOrder(), "kRules must list one rule per EventKind, in enum order");

}  // namespace

namespace internal {

// ---------------------------------------------------------------------------
// Helpers shared by the rules (policy_crashes.cc uses them too)
// ---------------------------------------------------------------------------

// High-confidence machine fault: evict at once, skipping diagnostics. Fast
// coarse isolation beats precise localization: one healthy machine evicted
// costs less than thousands of GPUs idling while we diagnose. Reconcile then
// swaps a standby into the freed slot.
Status EvictForFault(RuleContext& ctx, const MachineId& machine, const std::string& cause,
                     std::optional<Time> fault) {
  const MachineStatus* m = ctx.state.FindMachine(machine);
  if (m == nullptr) return Status::NotFound("machine " + machine + " is not known to the controller");
  if (m->state == MachineState::kEvicted) return Status::OK();  // a repeat report: already out
  int64_t incident = 0;
  // Only a machine in a live job makes a fault episode; a standby that dies
  // just shrinks the pool.
  if (m->state == MachineState::kActive && ctx.state.job != JobState::kStopped) {
    Result<Incident*> inc = OpenIncident(ctx, IncidentClass::kExplicit, cause, fault);
    if (!inc.ok()) return inc.status();
    (*inc)->evicted.push_back(machine);
    (*inc)->resolution = Resolution::kEvictedAndReplaced;
    (*inc)->why = "evicted " + machine + " at once: " + cause;
    incident = (*inc)->id;
  }
  return Emit(ctx, EvictAction(machine, incident, cause));
}

Status StopJob(RuleContext& ctx, const std::string& cause, std::optional<Time> fault,
               const std::string& why) {
  Result<Incident*> inc = OpenIncident(ctx, IncidentClass::kExplicit, cause, fault);
  if (!inc.ok()) return inc.status();
  (*inc)->why = why;
  return Emit(ctx, StopJobAction((*inc)->id, why));
}

// Time lists stay sorted even when reports arrive out of order, so pruning
// is one binary search.
void InsertSorted(std::vector<Time>& times, Time t) {
  times.insert(std::upper_bound(times.begin(), times.end(), t), t);
}
// Drops the entries earlier than `cutoff`.
void PruneBefore(std::vector<Time>& times, Time cutoff) {
  times.erase(times.begin(), std::lower_bound(times.begin(), times.end(), cutoff));
}


bool RanksAreLive(JobState s) { return s == JobState::kRestarting || s == JobState::kRunning; }
bool LadderEnabled(const PolicyConfig& c) { return !c.ladder.rungs.empty(); }

Result<Incident*> OpenIncident(RuleContext& ctx, IncidentClass cls, const std::string& cause,
                               std::optional<Time> fault, bool localized) {
  const bool fresh = ctx.state.incidents.Current() == nullptr;
  Incident& inc = ctx.state.incidents.OpenOrJoin(cls, cause, fault, ctx.now, ctx.state.last_step);
  if (fresh) {
    if (cls == IncidentClass::kManual) {
      BULWARK_RETURN_IF_ERROR(ctx.state.ledger.Enter(TimeCategory::kManual, ctx.now));
    } else {
      ctx.state.ledger.FaultDetected(fault, ctx.now);
    }
  }
  if (!inc.localized && localized) inc.localized = ctx.now;
  return &inc;
}

// Over-evicts `machines` (those still active in the job) for the current
// implicit incident: ByteRobust's trade of a few healthy machines for
// minutes of the whole fleet's time. Reconcile swaps in standbys.
Status OverEvict(RuleContext& ctx, Incident& inc, const std::vector<MachineId>& machines, const std::string& why,
                 bool on_suspicion) {
  inc.resolution = Resolution::kEvictedAndReplaced;
  inc.why = why;
  for (const MachineId& m : machines) {
    const MachineStatus* ms = ctx.state.FindMachine(m);
    if (ms == nullptr || ms->state != MachineState::kActive) continue;
    inc.evicted.push_back(m);
    BULWARK_RETURN_IF_ERROR(Emit(ctx, EvictAction(m, inc.id, why)));
    if (on_suspicion && ctx.config.checkup_evicted) {
      BULWARK_RETURN_IF_ERROR(CheckUp(ctx, *ctx.state.FindMachine(m), inc.id));
    }
  }
  return Status::OK();
}

}  // namespace internal

const std::array<RuleEntry, kNumEventKinds>& RuleTable() { return kRules; }

Status Emit(RuleContext& ctx, Action action) {
  ClusterState& s = ctx.state;
  Incident* inc = s.incidents.Current();
  switch (action.kind) {
    case ActionKind::kRestartAll:
      if (inc != nullptr) {
        if (!inc->decision) inc->decision = ctx.now;
        if (inc->waiting_since) {
          inc->waited += ctx.now - *inc->waiting_since;
          inc->waiting_since.reset();
        }
        if (inc->resolution == Resolution::kWaiting) inc->resolution = Resolution::kEvictedAndReplaced;
        action.incident = inc->id;
      }
      BULWARK_RETURN_IF_ERROR(s.ledger.Enter(
          inc == nullptr ? TimeCategory::kStartup
                         : (inc->cls == IncidentClass::kManual ? TimeCategory::kManual
                                                               : TimeCategory::kRecovery),
          ctx.now));
      break;
    case ActionKind::kWaitForMachines:
      if (s.job == JobState::kWaitingForMachines) break;  // already waiting: a repeat
      if (inc != nullptr) {
        if (!inc->decision) inc->decision = ctx.now;
        inc->resolution = Resolution::kWaiting;
        inc->waiting_since = ctx.now;
        action.incident = inc->id;
      }
      BULWARK_RETURN_IF_ERROR(s.ledger.Enter(TimeCategory::kWaiting, ctx.now));
      break;
    case ActionKind::kStopJob:
      s.ladder = LadderStatus{};  // a stopped job climbs nothing more
      if (inc != nullptr) {
        if (!inc->decision) inc->decision = ctx.now;
        inc->resolution = Resolution::kStopped;
        inc->closed = true;
      }
      s.ledger.Stop(ctx.now);
      break;
    case ActionKind::kRequeue:
      if (inc != nullptr) {
        if (!inc->decision) inc->decision = ctx.now;
        inc->resolution = Resolution::kRequeued;
        action.incident = inc->id;
      }
      BULWARK_RETURN_IF_ERROR(s.ledger.Enter(
          inc != nullptr && inc->cls == IncidentClass::kManual ? TimeCategory::kManual : TimeCategory::kRecovery,
          ctx.now));
      break;
    case ActionKind::kEvict:
    case ActionKind::kActivate:
    case ActionKind::kReplenishStandby:
    case ActionKind::kCaptureStacks:
    case ActionKind::kRunDiagnostics:
    case ActionKind::kStageRelease:
    case ActionKind::kCheckup:
    case ActionKind::kAlignCheck:
      break;
  }
  BULWARK_RETURN_IF_ERROR(Apply(s, action, ctx.now));
  ctx.actions.push_back(std::move(action));
  return Status::OK();
}

namespace {

Status ApplyRule(RuleContext& ctx, const Event& event) {
  const RuleEntry& entry = kRules[static_cast<size_t>(KindOf(event))];
  Status st = entry.rule(ctx, event);
  return st.ok() ? st : st.Annotate(EventKindName(entry.kind));
}

Status EmitReconcile(RuleContext& ctx) {
  for (Action& a : Reconcile(ctx.state, ctx.config, ctx.now)) {
    BULWARK_RETURN_IF_ERROR(Emit(ctx, std::move(a)));
  }
  return Status::OK();
}

}  // namespace

Status Decide(RuleContext& ctx, const Event& event) {
  BULWARK_RETURN_IF_ERROR(ApplyRule(ctx, event));
  return EmitReconcile(ctx);
}

Status DecideAll(RuleContext& ctx, const std::vector<Event>& events,
                 std::vector<std::pair<size_t, Status>>* refused) {
  for (size_t i = 0; i < events.size(); ++i) {
    if (Status st = ApplyRule(ctx, events[i]); !st.ok()) refused->push_back({i, st});
  }
  return EmitReconcile(ctx);
}

}  // namespace bulwark::controller
