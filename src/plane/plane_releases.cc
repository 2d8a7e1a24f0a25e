// The plane's side of releases (controller/releases.h): journaling what each
// release runs, handing updates and rollbacks to the policy, launching the
// release a restart names, and the timers of lazy releases and requeues.
#include "plane/codec.h"
#include "plane/plane.h"

namespace bulwark::plane {

using nlohmann::json;

JobLaunch Plane::LaunchForLocked(int number) const {
  JobLaunch l = *launch_;
  auto it = releases_.find(number);
  if (it != releases_.end()) {
    l.argv = it->second.argv;
    l.env = it->second.env;
  }
  return l;
}

Result<int> Plane::Update(Release release, const JobSpec& spec, Time now) {
  PlaneLock lock(this);
  now = NowLocked(now);
  if (!controller_) return Status::FailedPrecondition("no job is running on this cluster; submit one first");
  const JobSpec& running = controller_->state().spec;
  if (spec.id != running.id) {
    return Status::InvalidArgument("the job file is for job '" + spec.id + "' but this cluster runs '" + running.id +
                                   "'; update with the running job's file");
  }
  // A release changes what the ranks run, not the shape of the job: that
  // would move shards and parallel groups, which is a new job.
  auto same = [&](const char* field, int a, int b) -> Status {
    if (a == b) return Status::OK();
    return Status::InvalidArgument(std::string("an update cannot change ") + field + " (" + std::to_string(b) +
                                   " -> " + std::to_string(a) + "); submit a new job for that");
  };
  BULWARK_RETURN_IF_ERROR(same("world_size", spec.world_size, running.world_size));
  BULWARK_RETURN_IF_ERROR(same("ranks_per_machine", spec.ranks_per_machine, running.ranks_per_machine));
  BULWARK_RETURN_IF_ERROR(same("parallel.tp", spec.tp, running.tp));
  BULWARK_RETURN_IF_ERROR(same("parallel.pp", spec.pp, running.pp));
  if (release.argv.empty()) return Status::InvalidArgument("an update needs a command to run");
  if (done_step_) return Status::FailedPrecondition("job " + running.id + " has finished; nothing to update");
  release.number = controller_->state().releases.latest + 1;
  release.created_ms = ToMs(now);
  // The release's content first, then the event that makes it one: a crash
  // between the two leaves a row the next update overwrites.
  BULWARK_RETURN_IF_ERROR(
      store_->Append(launch_->spec.id, ToMs(now), json{{"type", "release"}, {"release", EncodeRelease(release)}}.dump()));
  releases_[release.number] = release;
  Status st = HandleLocked(ReleaseCreated{release.number, release.now, release.why, now}, now, nullptr);
  if (!st.ok()) {
    releases_.erase(release.number);
    return st;
  }
  return release.number;
}

Status Plane::Rollback(int to, const std::string& why, Time now) {
  PlaneLock lock(this);
  now = NowLocked(now);
  if (!controller_) return Status::FailedPrecondition("no job is running on this cluster; submit one first");
  if (done_step_) return Status::FailedPrecondition("job " + launch_->spec.id + " has finished; nothing to roll back");
  return HandleLocked(RollbackRequested{to, why, now}, now, nullptr);
}

json Plane::ReleasesJson() {
  PlaneLock lock(this);
  json out{{"releases", json::array()}};
  if (!controller_) return out;
  const ReleaseState& r = controller_->state().releases;
  out["applied"] = r.applied;
  out["pending"] = r.pending;
  for (int n = 1; n <= r.latest; ++n) {
    Release rel;
    if (n == 1) {
      rel.argv = launch_->argv;
      rel.env = launch_->env;
      rel.why = "submitted";
    } else if (auto it = releases_.find(n); it != releases_.end()) {
      rel = it->second;
    }
    std::string state = n == r.applied   ? "running"
                        : n == r.staging ? "pending, staging (" + std::to_string(r.staged.size() + r.not_staged.size()) +
                                               " machines answered)"
                        : n == r.pending ? "pending"
                                         : "";
    if (r.rolled_back.count(n) != 0) state += state.empty() ? "rolled back" : ", rolled back before";
    json j = EncodeRelease(rel);
    j["number"] = n;
    j["state"] = state;
    out["releases"].push_back(std::move(j));
  }
  return out;
}

void Plane::ReleaseAndRequeueTimersLocked(Time now) {
  if (!journal_error_.ok()) return;
  const ClusterState& s = controller_->state();
  // The same conditions the rules check, so that a tick sends an event only
  // when it will be acted on (the journal does not fill with no-ops).
  if (s.requeue_until && !s.requeue_granted && now >= *s.requeue_until) {
    FeedLocked(RequeueDue{now}, now, nullptr);
  }
  const ReleaseState& r = controller_->state().releases;
  if (r.staging != 0 && now >= r.stage_deadline) FeedLocked(StageDue{r.staging, now}, now, nullptr);
  const bool live = s.job == JobState::kRunning || s.job == JobState::kRestarting;
  if (r.pending != 0 && live && !s.restart_pending && s.incidents.Current() == nullptr &&
      s.ladder.state == LadderState::kIdle && now - r.pending_since >= options_.policy.update_force_after) {
    FeedLocked(ReleaseDue{r.pending, now}, now, nullptr);
  }
}

}  // namespace bulwark::plane
