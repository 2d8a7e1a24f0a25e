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

// The machines whose ranks stand out most in the stacks: the analyzer's
// suspects are the smallest parallel group holding every outlier, and a
// stuck rank's pipeline neighbours are outliers too (they wait in send/recv
// while the data-parallel majority waits in the all-reduce). Among the
// outlier groups the largest is those waiters; the others, and ranks with no
// stack at all, are the narrowest choice.
std::vector<MachineId> NarrowestMachines(const ClusterState& s, const StacksAnalyzed& x) {
  std::set<MachineId> out;
  const int world = s.placement.world_size();
  auto add = [&](int r) {
    if (r >= 0 && r < world) out.insert(s.placement.MachineOf(r));
  };
  // groups[0] is the healthy majority; groups are largest first.
  const size_t first = x.groups.size() > 2 ? 2 : 1;
  for (size_t g = first; g < x.groups.size(); ++g) {
    for (int r : x.groups[g].ranks) add(r);
  }
  for (int r : x.missing) add(r);
  return {out.begin(), out.end()};
}

// An earlier implicit eviction of `kind` at `step` from the slot `machine`
// holds now: the fault came back on the machine that replaced the evicted
// one, so it follows the job (its code, its data, its rank), not a machine.
const ClusterState::ImplicitEviction* FollowsJob(const ClusterState& s, const std::string& kind, int64_t step,
                                                 const std::vector<MachineId>& machines) {
  for (const MachineId& m : machines) {
    const int slot = s.placement.SlotOf(m);
    for (const ClusterState::ImplicitEviction& e : s.implicit_evictions) {
      if (e.kind == kind && e.slot == slot && e.machine != m && (kind == "slow" || e.step == step)) return &e;
    }
  }
  return nullptr;
}

// Over-eviction the pool can absorb (PolicyConfig::narrow_to_pool): when the
// group is larger than the standbys at hand, only the narrowest machines go
// (`narrow`, when that is fewer), and the rest stay under watch. Evicting a
// whole 16-machine pipeline into a pool of 12 idled the job for a 30-minute
// provisioning wait in the simulator; the stacks or the culprit's own values
// already separate the faulty machine from its waiting neighbours.
std::vector<MachineId> FitToPool(RuleContext& ctx, Incident& inc, const std::vector<MachineId>& group,
                                 const std::vector<MachineId>& narrow) {
  const int available = ctx.state.CountIn(MachineState::kStandby);
  if (!ctx.config.narrow_to_pool || static_cast<int>(group.size()) <= available || narrow.empty() ||
      narrow.size() >= group.size()) {
    return group;
  }
  std::string watched;
  for (const MachineId& m : group) {
    if (std::find(narrow.begin(), narrow.end(), m) == narrow.end()) watched += (watched.empty() ? "" : ", ") + m;
  }
  inc.notes.push_back("narrowed to " + std::to_string(narrow.size()) + " of the group's " +
                      std::to_string(group.size()) + " machines: " + std::to_string(available) +
                      " standby(s) at hand; under watch: " + watched);
  return narrow;
}

// Records what an implicit eviction took, slot by slot, for FollowsJob.
void RecordImplicit(ClusterState& s, const std::string& kind, int64_t step, const std::vector<MachineId>& machines) {
  for (const MachineId& m : machines) {
    const int slot = s.placement.SlotOf(m);
    if (slot >= 0) s.implicit_evictions.push_back({kind, step, slot, m});
  }
  // Fail-slow entries have no step to expire them: keep the newest few.
  if (s.implicit_evictions.size() > 64) s.implicit_evictions.erase(s.implicit_evictions.begin());
}

// The fault came back where the evicted machine was: stop, nothing more
// evicted. Evicting the next machine would drain the pool one healthy
// machine at a time for a fault the second occurrence shows to be the job's.
Status StopFollowingJob(RuleContext& ctx, Incident& inc, const std::string& what,
                        const ClusterState::ImplicitEviction& e, const MachineId& now_on) {
  inc.resolution = Resolution::kStopped;
  inc.why = "stopped: " + what + " came back on " + now_on + ", which replaced " + e.machine + " (evicted for it): it " +
            "follows the job, not the machine, so the job's code or data (nothing more evicted); read the stacks, " +
            "fix, then resubmit";
  return Emit(ctx, StopJobAction(inc.id, inc.why));
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
    const std::vector<MachineId> outliers = NarrowestMachines(ctx.state, x);
    const int64_t step = ctx.state.last_step + 1;
    if (const auto* e = FollowsJob(ctx.state, "hang", step, outliers.empty() ? x.suspects : outliers)) {
      return StopFollowingJob(ctx, *inc, "the hang at step " + std::to_string(step),
                              *e, ctx.state.placement.slots[e->slot]);
    }
    const std::vector<MachineId> evict = FitToPool(ctx, *inc, x.suspects, outliers);
    std::string who;
    for (const MachineId& m : evict) who += (who.empty() ? "" : ", ") + m;
    const bool whole = evict.size() == x.suspects.size();
    RecordImplicit(ctx.state, "hang", step, outliers.empty() ? evict : outliers);
    return OverEvict(ctx, *inc, evict,
                     "evicted " + who + (x.group.empty() || !whole ? "" : " (" + x.group + ")") +
                         " by stack aggregation: " + x.why,
                     /*on_suspicion=*/true);
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
    // Steps slowed while compute held: measure the links.
    if (x.network && internal::LinkCheckIsDue(s, ctx.config)) return internal::StartLinkCheck(ctx, x);
    // Every machine slower together: nothing to evict. Kept for people.
    s.notes.push_back("at step " + std::to_string(s.last_step) + ": " + x.detail);
    if (s.notes.size() > 20) s.notes.erase(s.notes.begin());
    return Status::OK();
  }
  if (s.FindMachine(x.machine) == nullptr) {
    return Status::NotFound("machine " + x.machine + " is not known to the controller");
  }
  if (!s.IsActive(x.machine)) return Status::OK();
  if (const auto* prior = FollowsJob(s, "slow", 0, {x.machine})) {
    // The machine that replaced a slow one is slow the same way: the rank's
    // share of the work is (an uneven shard, a bigger stage), not a machine.
    // Evicting the next one would not help; training goes on, recorded.
    s.notes.push_back("at step " + std::to_string(s.last_step) + ": " + x.detail + "; " + x.machine + " replaced " +
                      prior->machine + ", evicted for the same slowness: it follows the rank, nothing evicted");
    if (s.notes.size() > 20) s.notes.erase(s.notes.begin());
    return Status::OK();
  }
  Result<Incident*> inc = OpenIncident(ctx, IncidentClass::kImplicit, Describe(e), std::nullopt);
  if (!inc.ok()) return inc.status();
  std::string group;
  std::vector<MachineId> machines = FitToPool(ctx, **inc, GroupMachines(s, {x.machine}, &group), {x.machine});
  if (machines.size() == 1) group.clear();
  RecordImplicit(s, "slow", 0, {x.machine});
  return OverEvict(ctx, **inc, machines,
                   "evicted " + (group.empty() ? x.machine : group + " (holding " + x.machine + ")") + ": " + x.detail,
                   /*on_suspicion=*/true);
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
    if (const auto* prior = FollowsJob(s, "nan", x.step, x.culprits)) {
      // The replacement's own values went bad at the same step: the data or
      // the model, or corruption the ladder must find; not this machine.
      if (LadderEnabled(ctx.config)) {
        return EnterLadder(ctx, **inc, x.kind + " at step " + std::to_string(x.step) + " came back on the machine "
                                           "that replaced " + prior->machine, x.step, /*reattempted=*/true);
      }
      return StopFollowingJob(ctx, **inc, "the " + x.kind + " at step " + std::to_string(x.step), *prior,
                              s.placement.slots[prior->slot]);
    }
    std::string group;
    std::vector<MachineId> machines = FitToPool(ctx, **inc, GroupMachines(s, x.culprits, &group), x.culprits);
    if (machines.size() == x.culprits.size()) group.clear();
    RecordImplicit(s, "nan", x.step, x.culprits);
    std::string who;
    for (const MachineId& m : x.culprits) who += (who.empty() ? "" : ", ") + m;
    return OverEvict(ctx, **inc, machines,
                     "evicted " + (group.empty() ? who : group + " (holding " + who + ")") + ": its ranks' own " +
                         (x.kind == "nan" ? "gradients were non-finite" : "gradients spiked") + " at step " +
                         std::to_string(x.step) + " while the others' were not",
                     /*on_suspicion=*/true);
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
