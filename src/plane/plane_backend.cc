// The plane's side of the cluster backend (cluster/backend.h): which of the
// policy's decisions the cluster manager must hear about. The backend does
// its work in the background, so these calls are cheap under the plane's lock.
#include "plane/plane.h"

#include <algorithm>

namespace bulwark::plane {

void Plane::ActuateBackendLocked(const Action& a) {
  if (!options_.backend || !backend_done_.insert(a.id).second) return;
  switch (a.kind) {
    case ActionKind::kEvict:
      // The incident id travels into the manager's own record (Slurm's node
      // Reason), where an administrator looks first.
      options_.backend->Drain(a.machine, DrainReasonLocked(a.incident, a.reason));
      break;
    case ActionKind::kReplenishStandby: {
      // One job of a fleet has no standbys of its own: the fleet sizes its
      // one pool over every job (Fleet::SizePool), where each job asking
      // for its own P99 asked for more than the fleet's.
      if (options_.wants_machines) break;
      // The shortfall is the pool's total; ask only for what was not asked
      // since the last standby arrived.
      const int64_t arrivals = controller_ ? controller_->state().standby_arrivals : 0;
      if (arrivals != backend_arrivals_) {
        backend_arrivals_ = arrivals;
        backend_asked_ = 0;
      }
      if (a.count > backend_asked_) {
        options_.backend->Acquire(a.id, a.count - backend_asked_);
        backend_asked_ = a.count;
      }
      break;
    }
    default:
      break;
  }
}

void Plane::ReconcileBackendLocked() {
  if (!options_.backend || !controller_) return;
  const ClusterState& s = controller_->state();
  for (const auto& [id, m] : s.machines) {
    if (m.state != MachineState::kEvicted) continue;
    // The incident that evicted it last names the drain, as it did the first time.
    int64_t incident = 0;
    for (const Incident& i : s.incidents.all()) {
      if (std::find(i.evicted.begin(), i.evicted.end(), id) != i.evicted.end()) incident = i.id;
    }
    options_.backend->Drain(id, DrainReasonLocked(incident, m.last_reason));
  }
}

std::string Plane::DrainReasonLocked(int64_t incident, const std::string& why) {
  const std::string job = !options_.job_name.empty() ? options_.job_name : launch_ ? launch_->spec.id : "";
  std::string head = job.empty() ? "" : "job " + job;
  if (incident > 0) head += (head.empty() ? "" : " ") + std::string("incident ") + std::to_string(incident);
  return head.empty() ? why : head + ": " + why;
}

}  // namespace bulwark::plane
