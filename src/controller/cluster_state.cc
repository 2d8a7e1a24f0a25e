#include "controller/cluster_state.h"

#include <algorithm>

namespace bulwark::controller {

MachineStatus* MachineIndex::Find(const std::map<MachineId, MachineStatus>& machines, const MachineId& id) const {
  if (by_id_.size() != machines.size()) {
    // Machines are never removed, so a size that differs means some were
    // added (or this is a copy's first use): index them all again.
    by_id_.clear();
    by_id_.reserve(machines.size());
    for (const auto& [key, m] : machines) by_id_.emplace(key, const_cast<MachineStatus*>(&m));
  }
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second;
}

void MachineIndex::Added(const std::map<MachineId, MachineStatus>& machines,
                         std::map<MachineId, MachineStatus>::iterator added) {
  if (by_id_.size() + 1 == machines.size()) by_id_.emplace(added->first, &added->second);
}

MachineStatus* ClusterState::FindMachine(const MachineId& id) { return machine_index.Find(machines, id); }

const MachineStatus* ClusterState::FindMachine(const MachineId& id) const { return machine_index.Find(machines, id); }

bool ClusterState::IsActive(const MachineId& id) const {
  const MachineStatus* m = FindMachine(id);
  return m != nullptr && m->state == MachineState::kActive;
}

void SetDomainDown(ClusterState& state, ClusterState::DomainStatus& d, bool down) {
  if (d.down != down) state.domains_down += down ? 1 : -1;
  d.down = down;
}

void SetCheckup(ClusterState& state, MachineStatus& m, int64_t incident) {
  state.checkups_in_flight += (incident != 0 ? 1 : 0) - (m.checkup != 0 ? 1 : 0);
  m.checkup = incident;
}

Result<MachineStatus*> AddMachine(ClusterState& state, const MachineId& id, Time at) {
  if (id.empty()) return Status::InvalidArgument("a machine needs a non-empty id");
  if (state.FindMachine(id) != nullptr) {
    return Status::FailedPrecondition("machine " + id + " is already known");
  }
  MachineStatus m;
  m.id = id;
  m.state = MachineState::kJoining;
  m.state_since = at;
  auto it = state.machines.emplace(id, std::move(m)).first;
  state.machine_index.Added(state.machines, it);
  MachineStatus& added = it->second;
  ++state.machines_in_state[static_cast<int>(MachineState::kJoining)];
  return &added;
}

Status SetMachineState(ClusterState& state, const MachineId& id, MachineState to, Time at,
                       std::string reason) {
  MachineStatus* m = state.FindMachine(id);
  if (m == nullptr) return Status::NotFound("machine " + id + " is not known to the controller");
  const MachineState from = m->state;
  BULWARK_RETURN_IF_ERROR(m->MoveTo(to, at, std::move(reason)));
  --state.machines_in_state[static_cast<int>(from)];
  ++state.machines_in_state[static_cast<int>(to)];
  if (from == MachineState::kStandby) {
    state.standbys.erase(id);
    state.ready_standbys.erase(id);
  }
  if (from == MachineState::kActive && m->slot >= 0) state.vacated_slots.insert(m->slot);
  if (to == MachineState::kStandby) {
    state.standbys.insert(id);
    ++state.standby_arrivals;
  }
  return Status::OK();
}

Status SetJobState(ClusterState& state, JobState to, Time at) {
  Status st = CheckJobTransition(state.job, to);
  if (!st.ok()) return st.Annotate("job " + state.spec.id);
  state.job = to;
  state.job_since = at;
  return Status::OK();
}

Status Apply(ClusterState& state, const Action& action, Time now) {
  switch (action.kind) {
    case ActionKind::kEvict:
      return SetMachineState(state, action.machine, MachineState::kEvicted, now, action.reason);
    case ActionKind::kActivate:
      return SetMachineState(state, action.machine, MachineState::kActive, now, "activated into the job");
    case ActionKind::kRestartAll: {
      // Only the slots that changed hands touch the machines' records. When
      // Reconcile named them, only those are looked at.
      const std::vector<MachineId>& before = state.placement.slots;
      const std::vector<MachineId>& after = action.placement.slots;
      const bool known = action.slots_known && before.size() == after.size();
      std::vector<int> look;
      if (known) {
        look = action.changed_slots;
      } else {
        look.resize(std::max(before.size(), after.size()));
        for (size_t i = 0; i < look.size(); ++i) look[i] = static_cast<int>(i);
      }
      std::set<int> candidates;  // slots that changed hands now
      for (const int i : look) {
        const size_t u = static_cast<size_t>(i);
        if (u < before.size() && u < after.size() && before[u] == after[u]) continue;
        candidates.insert(i);
        if (u < before.size()) {
          MachineStatus* old = state.FindMachine(before[u]);
          if (old != nullptr && old->slot == i) old->slot = -1;
        }
        if (u < after.size()) {
          if (MachineStatus* now_there = state.FindMachine(after[u])) now_there->slot = i;
        }
      }
      // A slot is open afterwards only if it was vacated before or changed
      // hands now, and its machine is not active.
      candidates.insert(state.vacated_slots.begin(), state.vacated_slots.end());
      state.vacated_slots.clear();
      for (int i : candidates) {
        if (i < static_cast<int>(after.size()) && !state.IsActive(after[i])) state.vacated_slots.insert(i);
      }
      // An elastic pipeline job that lost a machine leaves the rest of that
      // pipeline out (reconcile.cc, NarrowerPipelineSlots): those machines
      // go back to the pool, where they set up spares of the job again.
      std::vector<MachineId> left;
      if (!known && state.spec.elastic() && state.spec.pp > 1) {
        const std::set<MachineId> placed(after.begin(), after.end());
        for (const MachineId& m : before) {
          if (placed.count(m) == 0 && state.IsActive(m)) left.push_back(m);
        }
      }
      if (known) {
        for (const int i : action.changed_slots) state.placement.slots[i] = after[i];
        state.placement.generation = action.placement.generation;
        state.placement.ranks_per_machine = action.placement.ranks_per_machine;
      } else {
        state.placement = action.placement;
      }
      for (const MachineId& m : left) {
        BULWARK_RETURN_IF_ERROR(SetMachineState(state, m, MachineState::kStandby, now,
                                                "its pipeline lost a machine; back to the pool"));
      }
      if (action.release != state.releases.applied) {
        state.releases.applied_by_update = action.release > state.releases.applied;
        state.releases.applied = action.release;
        state.releases.applied_at = now;
        state.releases.applied_epoch = state.progress_epoch;
      }
      if (action.release == state.releases.pending) state.releases.pending = 0;
      // Whatever was being staged, this restart settles it: it runs the
      // release it names, with or without staged processes.
      state.releases.staging = 0;
      state.releases.staged.clear();
      state.releases.not_staged.clear();
      state.requeue_until.reset();
      state.requeue_granted = false;
      state.restart_pending = false;
      state.restart_reason.clear();
      state.last_restart_at = now;
      // An elastic job below full width: its ledger counts the missing
      // replicas' share of the time as degraded.
      if (state.spec.world_size > 0) {
        const int width = state.placement.world_size();
        state.ledger.SetShare(static_cast<double>(width) / state.spec.world_size);
        Incident* inc = state.incidents.Current();
        if (width < state.spec.world_size && inc != nullptr) inc->trained_on = width;
        state.rejoin_pending = width >= state.spec.world_size;
      }
      return SetJobState(state, JobState::kRestarting, now);
    }
    case ActionKind::kWaitForMachines:
      if (state.job == JobState::kWaitingForMachines) return Status::OK();
      return SetJobState(state, JobState::kWaitingForMachines, now);
    case ActionKind::kStopJob:
      if (state.job == JobState::kStopped) return Status::OK();
      return SetJobState(state, JobState::kStopped, now);
    case ActionKind::kReplenishStandby:
      return Status::OK();  // a request to the cluster backend; the pool changes when machines join
    case ActionKind::kCaptureStacks:
      return Status::OK();  // an observation to make; the analysis comes back as an event
    case ActionKind::kRunDiagnostics:
      return Status::OK();  // the ladder's state says it is in flight; results come back as events
    case ActionKind::kStageRelease:
      return Status::OK();  // the machines answer with ReleaseStaged
    case ActionKind::kCheckup:
      return Status::OK();  // MachineStatus::checkup says it is in flight; the answer is an event
    case ActionKind::kAlignCheck:
      return Status::OK();  // ClusterState::align_check says it is in flight; answers are events
    case ActionKind::kRequeue:
      state.requeue_until = action.until;
      state.requeue_granted = false;
      if (state.job == JobState::kWaitingForMachines) return Status::OK();
      return SetJobState(state, JobState::kWaitingForMachines, now);
  }
  return Status::Internal("unknown action kind");
}

}  // namespace bulwark::controller
