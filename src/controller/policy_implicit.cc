// The policy's rules for implicit faults: a suspected hang (capture every
// rank's stacks), the stack analyzer's verdict (over-evict the outliers'
// group, or reattempt), a fail-slow machine (over-evict its group) and a
// NaN or spike (evict a culprit's group, or reattempt and then climb the
// stop-time ladder). Part of policy.cc's rule table; helpers in
// policy_internal.h.
#include <algorithm>
#include <set>

#include "controller/policy_internal.h"

namespace bulwark::controller {
namespace internal {
namespace {

// The machines of the smallest parallel group holding every rank of
// `machines` (topology.h); a group as large as the job means the machines
// themselves.
std::vector<MachineId> GroupMachines(const ClusterState& s, const std::vector<MachineId>& machines,
                                     std::string* group_name) {
  std::vector<int> ranks;
  for (const MachineId& m : machines) {
    int slot = s.placement.SlotOf(m);
    if (slot < 0) continue;
    for (int i = 0; i < s.placement.ranks_per_machine; ++i) ranks.push_back(slot * s.placement.ranks_per_machine + i);
  }
  std::sort(ranks.begin(), ranks.end());
  const Topology t = s.spec.topology();
  std::optional<ParallelGroup> g = SmallestGroupContaining(t, ranks);
  if (!g || static_cast<int>(g->ranks.size()) >= t.world || t.world != s.placement.world_size()) return machines;
  std::set<MachineId> out(machines.begin(), machines.end());
  for (int r : g->ranks) out.insert(s.placement.MachineOf(r));
  if (out.size() > machines.size()) *group_name = g->Name();
  return {out.begin(), out.end()};
}

// While the ladder diagnoses or replays, the ranks are stopped on purpose:
// their silence, exits and leftover signals are the stop's, not faults.

bool StaleForRestart(const ClusterState& s, Time observed) {
  return !RanksAreLive(s.job) || LadderHoldsJob(s) || (s.last_restart_at && observed <= *s.last_restart_at);
}

}  // namespace

bool LadderHoldsJob(const ClusterState& s) {
  return s.ladder.state == LadderState::kDiagnosing || s.ladder.state == LadderState::kReplaying;
}

// No progress: ask every machine for its ranks' stacks. The verdict comes
// back as StacksAnalyzed; until then the incident is detected, not localized.
Status OnHangSuspected(RuleContext& ctx, const Event& e) {
  const auto& x = std::get<HangSuspected>(e);
  if (StaleForRestart(ctx.state, x.observed)) return Status::OK();
  Result<Incident*> inc = OpenIncident(ctx, IncidentClass::kImplicit, Describe(e), x.since, /*localized=*/false);
  if (!inc.ok()) return inc.status();
  (*inc)->why = "capturing every rank's stacks to find the outliers";
  return Emit(ctx, CaptureStacksAction((*inc)->id, ctx.state.placement, Describe(e)));
}

Status OnStacksAnalyzed(RuleContext& ctx, const Event& e) {
  const auto& x = std::get<StacksAnalyzed>(e);
  Incident* inc = ctx.state.incidents.Current();
  // The incident ended (another fault's restart answered it) before the
  // stacks came back: they describe ranks that no longer run.
  if (inc == nullptr || inc->id != x.incident || !RanksAreLive(ctx.state.job)) return Status::OK();
  // A machine that went silent while the stacks were being taken was evicted
  // and the job restarted: the hang was that machine's, and the stacks (the
  // survivors waiting on it) would over-evict its healthy group.
  if (x.generation != 0 && x.generation != ctx.state.placement.generation) {
    inc->stacks = x;
    inc->notes.push_back("stacks arrived after the restart of generation " + std::to_string(x.generation) +
                         ": kept for people, no action");
    return Status::OK();
  }
  inc->stacks = x;
  inc->localized = ctx.now;
  if (!x.suspects.empty()) {
    std::string who;
    for (const MachineId& m : x.suspects) who += (who.empty() ? "" : ", ") + m;
    return OverEvict(ctx, *inc, x.suspects,
                     "evicted " + who + (x.group.empty() ? "" : " (" + x.group + ")") + " by stack aggregation: " + x.why);
  }
  inc->resolution = Resolution::kReattempt;
  inc->why = "reattempt in place: " + x.why;
  ctx.state.restart_pending = true;
  ctx.state.restart_reason = "hang with no outlier";
  return Status::OK();
}

Status OnFailSlowSuspected(RuleContext& ctx, const Event& e) {
  const auto& x = std::get<FailSlowSuspected>(e);
  ClusterState& s = ctx.state;
  if (StaleForRestart(s, x.observed)) return Status::OK();
  if (x.machine.empty()) {
    // Every machine slower together: nothing to evict. Kept for people.
    s.notes.push_back("at step " + std::to_string(s.last_step) + ": " + x.detail);
    if (s.notes.size() > 20) s.notes.erase(s.notes.begin());
    return Status::OK();
  }
  if (s.FindMachine(x.machine) == nullptr) {
    return Status::NotFound("machine " + x.machine + " is not known to the controller");
  }
  if (!s.IsActive(x.machine)) return Status::OK();
  Result<Incident*> inc = OpenIncident(ctx, IncidentClass::kImplicit, Describe(e), std::nullopt);
  if (!inc.ok()) return inc.status();
  std::string group;
  std::vector<MachineId> machines = GroupMachines(s, {x.machine}, &group);
  return OverEvict(ctx, **inc, machines,
                   "evicted " + (group.empty() ? x.machine : group + " (holding " + x.machine + ")") + ": " + x.detail);
}

// A culprit named by its local values: evict its group. None: the job's own
// anomaly; reattempt from the newest checkpoint (the ranks held the bad step
// back, so that is the one before it), and stop if the very same step fails
// again: a deterministic replay that reproduces it says data or model, not
// hardware. The stop-time ladder (issue 12) will sit between the two.
Status OnTrainingAnomaly(RuleContext& ctx, const Event& e) {
  const auto& x = std::get<TrainingAnomaly>(e);
  ClusterState& s = ctx.state;
  if (StaleForRestart(s, x.observed)) return Status::OK();
  for (const MachineId& m : x.culprits) {
    if (s.FindMachine(m) == nullptr) return Status::NotFound("machine " + m + " is not known to the controller");
  }
  Result<Incident*> inc = OpenIncident(ctx, IncidentClass::kImplicit, Describe(e), x.at);
  if (!inc.ok()) return inc.status();
  if (!x.culprits.empty()) {
    std::string group;
    std::vector<MachineId> machines = GroupMachines(s, x.culprits, &group);
    std::string who;
    for (const MachineId& m : x.culprits) who += (who.empty() ? "" : ", ") + m;
    return OverEvict(ctx, **inc, machines,
                     "evicted " + (group.empty() ? who : group + " (holding " + who + ")") + ": its ranks' own " +
                         (x.kind == "nan" ? "gradients were non-finite" : "gradients spiked") + " at step " +
                         std::to_string(x.step) + " while the others' were not");
  }
  if (s.ladder.state == LadderState::kWatching) {
    return EnterLadder(ctx, **inc, x.kind + " at step " + std::to_string(x.step) + " with no culprit, again",
                       x.step, true);
  }
  if (s.anomaly_reattempted_step == x.step && LadderEnabled(ctx.config)) {
    // Deterministic on these machines: the data or the model, or a machine
    // that corrupts silently (SDC) the same way each time. The ladder tells.
    return EnterLadder(ctx, **inc, x.kind + " at step " + std::to_string(x.step) + " came back after a reattempt",
                       x.step, /*reattempted=*/true);
  }
  if (s.anomaly_reattempted_step == x.step) {
    (*inc)->why = "stopped: the " + x.kind + " at step " + std::to_string(x.step) +
                  " came back when step " + std::to_string(x.step) +
                  " was replayed from the checkpoint before it: deterministic, so the data or the model, not a "
                  "machine; inspect that step's batch and the learning rate, then resubmit";
    (*inc)->resolution = Resolution::kStopped;
    return Emit(ctx, StopJobAction((*inc)->id, (*inc)->why));
  }
  s.anomaly_reattempted_step = x.step;
  (*inc)->resolution = Resolution::kReattempt;
  (*inc)->why = "reattempt from the newest checkpoint before step " + std::to_string(x.step) +
                ": no rank's local values stand out (a transient fault, or one the stop-time ladder must find)";
  (*inc)->notes.push_back("marked for the stop-time ladder: " + x.kind + " with no culprit");
  s.restart_pending = true;
  s.restart_reason = x.kind + " at step " + std::to_string(x.step) + " with no culprit";
  return Status::OK();
}

}  // namespace internal
}  // namespace bulwark::controller
