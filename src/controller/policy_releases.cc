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
  s.releases.latest = x.release;
  s.releases.pending = x.release;
  s.releases.pending_since = x.observed;
  if (!x.now || !CanRestartNow(s)) return Status::OK();
  return PlannedRestart(ctx, "hot update to " + R(x.release) + (x.why.empty() ? "" : ": " + x.why),
                        Resolution::kUpdated,
                        "restart in place on the same machines from in-memory checkpoints with " + R(x.release));
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
