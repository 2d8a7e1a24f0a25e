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

// ---------------------------------------------------------------------------
// Helpers shared by the rules
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


// The facts of a crash as attribution needs them (crash_attribution.h):
// where the job was (the step its restored ranks were running, or start-up)
// and the chance bound for a job of this size.
CrashRecord RecordOf(const ClusterState& s, const MachineId& machine, const std::string& signature,
                     int exit_code, Time observed) {
  CrashRecord c{observed, machine, signature, s.progress_epoch, exit_code, kStartup, s.placement.generation};
  const bool restored = s.job == JobState::kRunning || s.restored_generation == s.placement.generation;
  if (restored) c.site = s.last_step + 1;
  return c;
}

CrashRules RulesFor(const RuleContext& ctx) {
  return CrashRules{ctx.config.user_code_signatures, ctx.config.max_crashes_without_progress,
                    static_cast<int>(ctx.state.placement.slots.size()), ctx.config.daily_failure_rate,
                    ctx.config.crash_loop_quantile};
}

// A crash that names no machine: a software error, a transient one, or a
// peer's echo. Attribution (crash_attribution.h) says whose it is; this
// carries it out:
//   the job's code or data (a user-code error again, the same failure on
//       another machine)                     -> stop, nothing evicted;
//   the same failure at the same step on the same machine
//                                            -> the stop-time ladder, whose
//       diagnostics tell a machine from the job; without a ladder, evict
//       the machine (a restart elsewhere tells the two apart: if it was the
//       job, the failure follows it to the standby and stops it there);
//   a crash loop beyond chance               -> the ladder, or stop without one;
//   a different crash on a machine that crashed within the window
//                                            -> evict it;
//   otherwise (peer-lost exits always)       -> reattempt in place.
// Shortly after a release, what would stop the job rolls back instead.
Status OnSoftwareCrash(RuleContext& ctx, const MachineId& machine, const std::string& signature, int exit_code,
                       Time observed, const std::string& cause) {
  ClusterState& s = ctx.state;
  MachineStatus* m = s.FindMachine(machine);
  if (m == nullptr) return Status::NotFound("machine " + machine + " is not known to the controller");
  if (!RanksAreLive(s.job) || m->state != MachineState::kActive || LadderHoldsJob(s)) return Status::OK();
  // Ranks that died at or before the latest restart are the restart's own
  // victims, or the echo (connection reset, NCCL error) of a fault already
  // handled: they are part of that episode, not a new crash (echo.h).
  if (ClassifyExit({0, observed, false}, {0, s.last_restart_at}, observed, Duration(0)) == ExitVerdict::kEcho) {
    return Status::OK();
  }

  const Time cutoff = observed - ctx.config.crash_window;
  s.crashes.erase(std::remove_if(s.crashes.begin(), s.crashes.end(),
                                 [&](const CrashRecord& c) { return c.at < cutoff; }),
                  s.crashes.end());
  PruneBefore(m->crashes, cutoff);
  const CrashRecord crash = RecordOf(s, machine, signature, exit_code, observed);
  const Duration since_progress =
      s.last_progress_at ? std::min(ctx.config.crash_window, observed - *s.last_progress_at) : ctx.config.crash_window;
  const CrashAttribution a = AttributeCrash(crash, s.crashes, !m->crashes.empty(), since_progress, RulesFor(ctx));
  s.crashes.push_back(crash);
  InsertSorted(m->crashes, observed);
  const std::string window = FormatDuration(ctx.config.crash_window);

  // Shortly after a release took effect, what would stop the job (the
  // code's own error, a failure that follows the job, a crash loop) or a
  // first code-error crash rolls back instead: the new release is the
  // suspect. A crash before an updated release completed its first step
  // means the release cannot even start (a usage error, a bad flag),
  // whatever the log says: rolling back beats evicting machines.
  const bool code_error = ctx.config.user_code_signatures.count(signature) != 0;
  const bool never_stepped = s.releases.applied_by_update && s.progress_epoch == s.releases.applied_epoch;
  const bool would_stop = a.verdict == CrashVerdict::kCodeError || a.verdict == CrashVerdict::kFollowsJob ||
                          a.verdict == CrashVerdict::kRepeatsHere || a.verdict == CrashVerdict::kCrashLoop;
  if (code_error || never_stepped || would_stop) {
    const std::string what = code_error ? "failed with the code error '" + signature + "'"
                             : never_stepped ? "came before its first step"
                             : a.verdict == CrashVerdict::kCrashLoop ? "ended a crash loop"
                                                                     : "failed: " + a.why;
    Result<bool> rolled = RollBackAfterCrash(ctx, cause, observed, what);
    if (!rolled.ok()) return rolled.status();
    if (*rolled) return Status::OK();
  }
  switch (a.verdict) {
    case CrashVerdict::kCodeError:
      return StopJob(ctx, cause, observed,
                     "stopped: " + a.why + ": the job's code or command is at fault, not a machine (nothing "
                     "evicted); fix the job, then resubmit");
    case CrashVerdict::kFollowsJob:
      if (signature.empty() && LadderEnabled(ctx.config) && s.ladder.state == LadderState::kIdle) break;
      return StopJob(ctx, cause, observed,
                     "stopped: software error " + a.why + " within " + window +
                         " without a completed step: the failure follows the job, not a machine, so a code or "
                         "data bug (nothing evicted); fix or roll back the code, then resubmit");
    default:
      break;
  }
  // The ladder's crash triggers: an unsigned crash while the ladder watches
  // a restart it decided is the fault coming back (the next rung); an
  // unsigned failure that recurs where it failed, or a loop beyond chance,
  // climbs the ladder instead of stopping (its diagnostics find a faulty
  // machine, or it stops the job as deterministic when it runs out of rungs,
  // so restarts stay bounded).
  const bool evidence = a.verdict == CrashVerdict::kFollowsJob || a.verdict == CrashVerdict::kRepeatsHere ||
                        a.verdict == CrashVerdict::kCrashLoop;
  if (signature.empty() && LadderEnabled(ctx.config) &&
      ((s.ladder.state == LadderState::kWatching && a.verdict != CrashVerdict::kReattempt) ||
       (s.ladder.state == LadderState::kIdle && evidence))) {
    Result<Incident*> inc = OpenIncident(ctx, IncidentClass::kExplicit, cause, observed);
    if (!inc.ok()) return inc.status();
    return EnterLadder(ctx, **inc, "unsigned crash on " + machine + ": " + a.why, s.last_step,
                       /*reattempted=*/a.since_progress > 0);
  }
  if (a.verdict == CrashVerdict::kCrashLoop) {
    return StopJob(ctx, cause, observed,
                   "stopped: " + a.why + " within " + window + ": a crash loop; read the ranks' logs, fix, then "
                   "resubmit");
  }
  if (a.verdict == CrashVerdict::kEvictMachine || a.verdict == CrashVerdict::kRepeatsHere) {
    Status st = EvictForFault(ctx, machine, cause + "; crashed again within " + window, observed);
    if (!st.ok()) return st;
    if (Incident* inc = s.incidents.Current()) {
      inc->why = "evicted " + machine + ": its ranks crashed twice within " + window;
    }
    return Status::OK();
  }
  Result<Incident*> inc = OpenIncident(ctx, IncidentClass::kExplicit, cause, observed);
  if (!inc.ok()) return inc.status();
  (*inc)->resolution = Resolution::kReattempt;
  (*inc)->why = "reattempt in place: " + a.why;
  s.restart_pending = true;
  s.restart_reason = cause;
  return Status::OK();
}

// Whether `machine`'s own ranks crashed in the current generation: then its
// listeners are gone with them, and a peer refused there is the echo of
// that crash, not a sign that nobody can reach the machine.
bool CrashedThisGeneration(const ClusterState& s, const MachineId& machine) {
  return std::any_of(s.crashes.begin(), s.crashes.end(), [&](const CrashRecord& c) {
    return c.machine == machine && c.generation == s.placement.generation;
  });
}

// The machine a peer-lost exit names: the one that owns the address its
// rank could not connect to (resolved by the plane from the addresses
// agents advertise), unless that machine's own ranks crashed first. Null
// when the exit names no one.
const MachineStatus* UnreachablePeer(const ClusterState& s, const RankExited& x) {
  if (x.unreachable.empty() || x.unreachable == x.machine || !IsPeerLost(x.exit_code, x.log_signature)) {
    return nullptr;
  }
  const MachineStatus* p = s.FindMachine(x.unreachable);
  if (p == nullptr || CrashedThisGeneration(s, p->id)) return nullptr;
  return p;
}

// A rank that could not connect to a peer names the machine at fault: one
// whose advertised address its peers cannot reach (an agent restarted
// outside its network namespace, a broken NIC configuration, a firewall).
// It costs that machine, at the first exit that names it: counting its
// neighbours' exits against the job stopped healthy jobs as crash loops
// (issue 40). Reconcile swaps a standby into its slot and the job goes on.
// Returns false when the exit blames no machine.
Result<bool> EvictUnreachablePeer(RuleContext& ctx, const RankExited& x, const std::string& cause) {
  ClusterState& s = ctx.state;
  const MachineStatus* m = s.FindMachine(x.machine);
  if (m == nullptr || !RanksAreLive(s.job) || m->state != MachineState::kActive || LadderHoldsJob(s)) return false;
  // An exit from before the latest restart is that restart's (echo.h).
  if (s.last_restart_at && x.observed <= *s.last_restart_at) return false;
  const MachineStatus* peer = UnreachablePeer(s, x);
  if (peer == nullptr) return false;
  // Already evicted (its neighbours' exits trail the first one's): the
  // echo of that eviction, nothing new. Not in the job otherwise: the
  // address named someone else's ranks; the exit is an ordinary peer loss.
  if (peer->state == MachineState::kEvicted) return true;
  if (peer->state != MachineState::kActive) return false;
  const MachineId culprit = peer->id;
  BULWARK_RETURN_IF_ERROR(EvictForFault(ctx, culprit, cause, x.observed));
  if (Incident* inc = s.incidents.Current()) {
    inc->why = "evicted " + culprit + ": its peers cannot reach it at " + x.unreachable_addr + " (rank " +
               std::to_string(x.rank) + " on " + x.machine + " could not connect); the job goes on without it";
  }
  return true;
}

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
  Result<bool> blamed = EvictUnreachablePeer(ctx, x, Describe(e));
  if (!blamed.ok() || *blamed) return blamed.status();
  return OnSoftwareCrash(ctx, x.machine, x.log_signature, x.exit_code, x.observed, Describe(e));
}

Status OnHeartbeatLost(RuleContext& ctx, const Event& e) {
  const auto& x = std::get<MachineHeartbeatLost>(e);
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
Status OverEvict(RuleContext& ctx, Incident& inc, const std::vector<MachineId>& machines, const std::string& why) {
  inc.resolution = Resolution::kEvictedAndReplaced;
  inc.why = why;
  for (const MachineId& m : machines) {
    const MachineStatus* ms = ctx.state.FindMachine(m);
    if (ms == nullptr || ms->state != MachineState::kActive) continue;
    inc.evicted.push_back(m);
    BULWARK_RETURN_IF_ERROR(Emit(ctx, EvictAction(m, inc.id, why)));
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
