// The rules for a crash that names no machine (policy.cc's OnRankExited and
// OnInspectionFailed hand them over): whose it is, by attribution
// (crash_attribution.h), and a peer-lost exit that names the machine its
// peers could not reach.
#include <algorithm>

#include "controller/crash_attribution.h"
#include "controller/echo.h"
#include "controller/policy_internal.h"

namespace bulwark::controller::internal {
namespace {

// The facts of a crash as attribution needs them (crash_attribution.h):
// where the job was (the step its restored ranks were running, or start-up)
// and the chance bound for a job of this size.
CrashRecord RecordOf(const ClusterState& s, const MachineId& machine, const std::string& signature,
                     int exit_code, Time observed) {
  CrashRecord c{observed, machine, signature, s.progress_epoch, exit_code, kStartup, s.placement.generation,
                s.furthest_step};
  const bool restored = s.job == JobState::kRunning || s.restored_generation == s.placement.generation;
  if (restored) c.site = s.last_step + 1;
  return c;
}

CrashRules RulesFor(const RuleContext& ctx) {
  return CrashRules{ctx.config.user_code_signatures, ctx.config.max_crashes_without_progress,
                    static_cast<int>(ctx.state.placement.slots.size()), ctx.config.daily_failure_rate,
                    ctx.config.crash_loop_quantile};
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

}  // namespace

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

}  // namespace bulwark::controller::internal
