// The policy's release rules (releases.h) and requeue mode's timer: hot
// updates now or at the next restart, forced after their age, operator
// rollbacks, automatic rollback after a release that crashes, and the
// ladder's rollback rung.
#include "controller/policy_internal.h"

namespace bulwark::controller::internal {
namespace {

// A planned restart in place (an update or a rollback): a manual incident,
// so the ledger counts its seconds as the operator's, not a fault's.
Status PlannedRestart(RuleContext& ctx, const std::string& cause, Resolution resolution, const std::string& why) {
  Result<Incident*> inc = OpenIncident(ctx, IncidentClass::kManual, cause, std::nullopt);
  if (!inc.ok()) return inc.status();
  (*inc)->resolution = resolution;
  (*inc)->why = why;
  ctx.state.restart_pending = true;
  ctx.state.restart_reason = cause;
  return Status::OK();
}

// Ranks that can be restarted now; otherwise the release waits for the
// job's next start, which applies it anyway.
bool CanRestartNow(const ClusterState& s) { return RanksAreLive(s.job) && !LadderHoldsJob(s); }

std::string R(int release) { return "release " + std::to_string(release); }

Status UpdateNow(RuleContext& ctx, int release, const std::string& why, const std::string& staging) {
  return PlannedRestart(ctx, "hot update to " + R(release) + (why.empty() ? "" : ": " + why), Resolution::kUpdated,
                        "restart in place on the same machines from in-memory checkpoints with " + R(release) +
                            (staging.empty() ? "" : " (" + staging + ")"));
}

// Every machine answered (or time ran out): restart with the staged
// release, unless the job can no longer be restarted in place (then the
// release stays pending for the job's next start).
Status FinishStaging(RuleContext& ctx, Time now, std::string why) {
  ReleaseState& r = ctx.state.releases;
  const int release = r.staging;
  const size_t machines = ctx.state.placement.slots.size();
  std::string note = "staged on " + std::to_string(r.staged.size()) + " of " + std::to_string(machines) +
                     " machines in " + FormatDuration(now - r.stage_started);
  if (!r.not_staged.empty()) note += "; the others start cold";
  if (!why.empty()) note = why + ": " + note;
  r.staging = 0;
  if (!CanRestartNow(ctx.state) || ctx.state.restart_pending) return Status::OK();
  return UpdateNow(ctx, release, r.stage_why, note);
}

}  // namespace

Status OnReleaseCreated(RuleContext& ctx, const Event& e) {
  const auto& x = std::get<ReleaseCreated>(e);
  ClusterState& s = ctx.state;
  if (s.job == JobState::kStopped) {
    return Status::FailedPrecondition("job " + s.spec.id + " is stopped: an update cannot restart it; "
                                      "fix the job and submit it again");
  }
  if (x.release != s.releases.latest + 1) {
    return Status::FailedPrecondition(R(x.release) + " is not the next release: the latest is " +
                                      std::to_string(s.releases.latest));
  }
  ReleaseState& r = s.releases;
  r.latest = x.release;
  r.pending = x.release;
  r.pending_since = x.observed;
  r.staging = 0;
  r.staged.clear();
  r.not_staged.clear();
  if (!CanRestartNow(s)) return Status::OK();
  // Requeue mode is the conventional baseline: nothing is set up ahead.
  const bool stage = s.spec.recovery != JobSpec::Recovery::kRequeue &&
                     ctx.config.release_stage_timeout > Duration::zero() && !s.placement.empty();
  if (stage) {
    // Lazy or now, the machines set the release up beside the running
    // ranks: the restart that applies it, planned or a fault's, then hands
    // the ranks to processes already loaded.
    BULWARK_RETURN_IF_ERROR(Emit(ctx, StageReleaseAction(s.placement, x.release, "stage " + R(x.release))));
  }
  if (!x.now) return Status::OK();
  if (stage) {
    r.staging = x.release;
    r.stage_started = x.observed;
    r.stage_deadline = x.observed + ctx.config.release_stage_timeout;
    r.stage_why = x.why;
    return Status::OK();
  }
  return UpdateNow(ctx, x.release, x.why, "");
}

Status OnReleaseStaged(RuleContext& ctx, const Event& e) {
  const auto& x = std::get<ReleaseStaged>(e);
  ClusterState& s = ctx.state;
  ReleaseState& r = s.releases;
  // A lazy release's staging, or a stale answer: nothing waits for it.
  if (x.release != r.staging) return Status::OK();
  (x.ready ? r.staged : r.not_staged).insert(x.machine);
  for (const MachineId& m : s.placement.slots) {
    if (r.staged.count(m) == 0 && r.not_staged.count(m) == 0) return Status::OK();
  }
  return FinishStaging(ctx, x.observed, "");
}

Status OnStageDue(RuleContext& ctx, const Event& e) {
  const auto& x = std::get<StageDue>(e);
  const ReleaseState& r = ctx.state.releases;
  if (x.release != r.staging || x.observed < r.stage_deadline) return Status::OK();
  return FinishStaging(ctx, x.observed, "staging ran out of time");
}

Status OnRollbackRequested(RuleContext& ctx, const Event& e) {
  const auto& x = std::get<RollbackRequested>(e);
  ClusterState& s = ctx.state;
  ReleaseState& r = s.releases;
  if (s.job == JobState::kStopped) {
    return Status::FailedPrecondition("job " + s.spec.id + " is stopped: a rollback cannot restart it; "
                                      "submit it again with the release you want");
  }
  int to = x.to;
  if (to == 0) {
    to = r.RollbackTarget();
    if (to == 0) {
      return Status::FailedPrecondition("the job runs " + R(r.applied) +
                                        " and no earlier release is left to roll back to");
    }
  }
  if (to < 1 || to > r.latest) {
    return Status::InvalidArgument("there is no " + R(to) + ": the job's releases are 1.." +
                                   std::to_string(r.latest) + " ('bulwark releases' lists them)");
  }
  if (to == r.applied && r.pending == 0) {
    return Status::FailedPrecondition("the job already runs " + R(to));
  }
  if (to < r.applied) r.rolled_back.insert(r.applied);
  r.staging = 0;  // a release being staged is not what the operator wants now
  r.pending = to;
  r.pending_since = x.observed;
  if (!CanRestartNow(s)) return Status::OK();
  return PlannedRestart(ctx, "rollback to " + R(to) + (x.why.empty() ? "" : ": " + x.why), Resolution::kRolledBack,
                        "restart in place on the same machines from in-memory checkpoints with " + R(to));
}

Status OnReleaseDue(RuleContext& ctx, const Event& e) {
  const auto& x = std::get<ReleaseDue>(e);
  ClusterState& s = ctx.state;
  // Stale: applied meanwhile, superseded, or a restart is already coming.
  if (x.release != s.releases.pending || !CanRestartNow(s) || s.restart_pending ||
      s.incidents.Current() != nullptr) {
    return Status::OK();
  }
  return PlannedRestart(ctx,
                        R(x.release) + " forced: it waited " + FormatDuration(x.observed - s.releases.pending_since) +
                            " for a restart",
                        Resolution::kUpdated,
                        "restart in place with " + R(x.release) + ": lazy releases are applied after " +
                            FormatDuration(ctx.config.update_force_after) + " at the latest");
}

Status OnRequeueDue(RuleContext& ctx, const Event& e) {
  const auto& x = std::get<RequeueDue>(e);
  ClusterState& s = ctx.state;
  if (!s.requeue_until || x.observed < *s.requeue_until) return Status::OK();
  s.requeue_granted = true;  // Reconcile restarts on the machines it now has
  return Status::OK();
}

Result<bool> RollBackAfterCrash(RuleContext& ctx, const std::string& cause, Time observed, const std::string& why) {
  ClusterState& s = ctx.state;
  ReleaseState& r = s.releases;
  const int to = r.RollbackTarget();
  if (to == 0 || !r.RecentlyApplied(observed, ctx.config.rollback_window)) return false;
  Result<Incident*> inc = OpenIncident(ctx, IncidentClass::kExplicit, cause, observed);
  if (!inc.ok()) return inc.status();
  (*inc)->resolution = Resolution::kRolledBack;
  (*inc)->why = "rolled back " + R(r.applied) + " -> " + std::to_string(to) + ": it took effect " +
                FormatDuration(observed - *r.applied_at) + " before this crash, which " + why;
  r.rolled_back.insert(r.applied);
  r.pending = to;
  r.pending_since = observed;
  s.restart_pending = true;
  s.restart_reason = "roll back to " + R(to) + " after " + cause;
  return true;
}

Result<bool> RollBackForLadder(RuleContext& ctx, Incident& inc) {
  ClusterState& s = ctx.state;
  ReleaseState& r = s.releases;
  const int to = r.RollbackTarget();
  if (to == 0) {
    inc.rungs.push_back({"rollback", ctx.now, ctx.now, "no earlier release: nothing to roll back"});
    return false;
  }
  BULWARK_RETURN_IF_ERROR(s.ladder.Move(LadderInput::kRestart));
  inc.rungs.push_back({"rollback", ctx.now, ctx.now, "rolled back " + R(r.applied) + " -> " + std::to_string(to)});
  inc.resolution = Resolution::kRolledBack;
  inc.why = "rolled back to " + R(to) + " (ladder): " + s.ladder.trigger;
  r.rolled_back.insert(r.applied);
  r.pending = to;
  r.pending_since = ctx.now;
  s.restart_pending = true;
  s.restart_reason = "ladder: roll back to " + R(to);
  return true;
}

}  // namespace bulwark::controller::internal
