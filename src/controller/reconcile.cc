#include "controller/reconcile.h"

#include <algorithm>
#include <optional>

#include "controller/domain_placement.h"

namespace bulwark::controller {
namespace {

// Slots that need a machine: past the end of the placement, or holding a
// machine that is no longer active (evicted, diagnosing).
std::vector<int> OpenSlots(const ClusterState& state, int needed) {
  std::vector<int> open;
  if (static_cast<int>(state.placement.slots.size()) == needed) {
    // A placed machine that is no longer active vacated its slot (Apply and
    // SetMachineState keep the index); a machine placed but never active is
    // the only other way, and Apply records it the same way.
    for (int slot : state.vacated_slots) {
      if (!state.IsActive(state.placement.slots[slot])) open.push_back(slot);
    }
    return open;
  }
  for (int i = 0; i < needed; ++i) {
    if (i >= static_cast<int>(state.placement.slots.size()) ||
        !state.IsActive(state.placement.slots[i])) {
      open.push_back(i);
    }
  }
  return open;
}

// The slots of an elastic job's next placement: its machines that are
// still active, then as many of `standbys` as fit, in id order (`joined`).
// The ranks of the slots it keeps are renumbered densely.
std::vector<MachineId> NarrowerSlots(const ClusterState& state, const std::vector<MachineId>& standbys,
                                     std::vector<MachineId>* joined) {
  std::vector<MachineId> next;
  for (const MachineId& m : state.placement.slots) {
    if (state.IsActive(m)) next.push_back(m);
  }
  for (auto standby = standbys.begin();
       standby != standbys.end() && static_cast<int>(next.size()) < state.spec.MachinesNeeded(); ++standby) {
    next.push_back(*standby);
    joined->push_back(*standby);
  }
  return next;
}

// The same for replicas that are pipelines (pp > 1). Ranks are stage-major
// (trainer/step/pipeline_plan.h), so with C machines a stage, slot s x C + c is
// stage s of the replicas in column c. A column is kept only whole; the
// active machines of a broken one are offered again with the standbys
// (Apply returns those left out to the pool), and new columns take pp
// machines each. Laid out stage by stage again, every kept machine holds
// the stage it held: its state is still of use.
std::vector<MachineId> NarrowerPipelineSlots(const ClusterState& state, const std::vector<MachineId>& standbys,
                                             std::vector<MachineId>* joined) {
  const int pp = state.spec.pp;
  const int placed = static_cast<int>(state.placement.slots.size()) / pp;
  const int full = state.spec.MachinesNeeded() / pp;
  std::vector<std::vector<MachineId>> columns;
  std::vector<MachineId> pool;
  for (int c = 0; c < placed; ++c) {
    std::vector<MachineId> column;
    for (int s = 0; s < pp; ++s) column.push_back(state.placement.slots[s * placed + c]);
    const bool whole = std::all_of(column.begin(), column.end(), [&](const MachineId& m) { return state.IsActive(m); });
    if (whole) {
      columns.push_back(std::move(column));
      continue;
    }
    for (const MachineId& m : column) {
      if (state.IsActive(m)) pool.push_back(m);
    }
  }
  pool.insert(pool.end(), standbys.begin(), standbys.end());
  for (size_t next = 0; static_cast<int>(columns.size()) < full && next + pp <= pool.size(); next += pp) {
    columns.emplace_back(pool.begin() + next, pool.begin() + next + pp);
    for (const MachineId& m : columns.back()) {
      if (state.standbys.count(m) != 0) joined->push_back(m);
    }
  }
  std::vector<MachineId> slots;
  for (int s = 0; s < pp; ++s) {
    for (const auto& column : columns) slots.push_back(column[s]);
  }
  return slots;
}

// The ring layout of the generation on `next_slots` (replicas of one rank
// a slot group, pp 1): the current one without the ranks of the slots
// that left, then a joiner for each rank of a slot that joined, numbered
// as NarrowerSlots numbers them (kept slots in order, then the new).
RingLayout NextRing(const Placement& now, const std::vector<MachineId>& next_slots, int ranks_per_machine) {
  const int L = now.ranks_per_machine, W = now.world_size();
  if (L != ranks_per_machine) return {};  // renumbered throughout: Default
  RingLayout ring = now.ring.world() == W ? now.ring : RingLayout::Default(W, 0);
  for (int slot = static_cast<int>(now.slots.size()) - 1; slot >= 0; --slot) {
    if (std::find(next_slots.begin(), next_slots.end(), now.slots[slot]) != next_slots.end()) continue;
    for (int l = L - 1; l >= 0; --l) ring = ring.Without(slot * L + l);
  }
  for (const MachineId& m : next_slots) {
    if (std::find(now.slots.begin(), now.slots.end(), m) != now.slots.end()) continue;
    for (int l = 0; l < L; ++l) ring = ring.WithJoiner();
  }
  return ring;
}

// An elastic job the pool cannot fill (JobSpec::kElastic), or one that
// grows back: restarted on what NarrowerSlots (or NarrowerPipelineSlots)
// gives; the replicas of the lost machines wait for machines while the
// others train.
std::optional<Action> ContinueNarrower(const ClusterState& state, const std::vector<MachineId>& standbys,
                                       const std::string& release_note, int release) {
  Placement next = state.placement;
  next.generation += 1;
  next.ranks_per_machine = state.spec.ranks_per_machine;
  std::vector<MachineId> joined;
  next.slots = state.spec.pp > 1 ? NarrowerPipelineSlots(state, standbys, &joined)
                                 : NarrowerSlots(state, standbys, &joined);
  // Already running on all it has (or nothing left to run on): no restart.
  if (next.slots.empty() || (joined.empty() && next.slots == state.placement.slots && !state.restart_pending)) {
    return std::nullopt;
  }
  next.ring = state.spec.pp > 1 ? RingLayout{} : NextRing(state.placement, next.slots, next.ranks_per_machine);
  std::string reason = (joined.empty() || state.restart_pending ? "continue on " : "grow to ") +
                       std::to_string(next.slots.size()) + " of " + std::to_string(state.spec.MachinesNeeded()) +
                       " machines";
  for (const MachineId& m : joined) reason += " +" + m;
  if (state.restart_pending) reason += ": " + state.restart_reason;
  return RestartAllAction(std::move(next), state.checkpoint_step, reason + release_note, release);
}

// An elastic job that trains on fewer machines than it asked for, on
// machines that are all still active: it has lost nothing since its last
// restart and may only grow.
bool TrainsNarrower(const ClusterState& state) {
  const bool live = state.job == JobState::kRunning || state.job == JobState::kRestarting;
  const int placed = static_cast<int>(state.placement.slots.size());
  return state.spec.elastic() && live && !state.restart_pending && placed > 0 &&
         placed < state.spec.MachinesNeeded() && state.CountIn(MachineState::kActive) == placed;
}

// Standbys under a switch that is down (policy_domains.cc) are taken by
// nothing: their heartbeats are about to stop too. With no domain down
// (always, without domains) the pool is every standby, in id order.
bool AnyDomainDown(const ClusterState& state) { return state.domains_down > 0; }
bool InDownDomain(const ClusterState& state, const MachineId& m) {
  const MachineStatus* status = state.FindMachine(m);
  if (status == nullptr || status->domain.empty()) return false;
  auto d = state.domains.find(status->domain);
  return d != state.domains.end() && d->second.down;
}
std::vector<MachineId> UsableStandbys(const ClusterState& state) {
  std::vector<MachineId> out;
  const bool filter = AnyDomainDown(state);
  for (const MachineId& m : state.standbys) {
    if (!filter || !InDownDomain(state, m)) out.push_back(m);
  }
  return out;
}

// The standbys such a job grows onto now: those that said whether they
// hold spares of it (StandbyReady), and those silent for
// standby_ready_wait. The replicas that train stop once, for the regroup;
// the joiner's process start happens beside them.
std::vector<MachineId> JoinableStandbys(const ClusterState& state, const PolicyConfig& config, Time now) {
  std::vector<MachineId> out;
  const bool filter = AnyDomainDown(state);
  for (const MachineId& m : state.standbys) {
    if (filter && InDownDomain(state, m)) continue;
    const MachineStatus* status = state.FindMachine(m);
    if (state.ready_standbys.count(m) != 0 ||
        (status != nullptr && now - status->state_since >= config.standby_ready_wait)) {
      out.push_back(m);
    }
  }
  return out;
}

}  // namespace

StandbyReport StandbyStatus(const ClusterState& state, const PolicyConfig& config) {
  const int needed = state.spec.MachinesNeeded();
  const int standbys = static_cast<int>(state.standbys.size());
  // Standbys that the job's own open slots will take are not spares.
  const int open = std::max(0, needed - state.CountIn(MachineState::kActive));
  return MakeStandbyReport(needed, std::max(0, standbys - open), config.daily_failure_rate,
                           config.standby_quantile);
}

std::vector<Action> Reconcile(const ClusterState& state, const PolicyConfig& config, Time now) {
  std::vector<Action> out;
  if (state.job == JobState::kStopped) return out;
  const int needed = state.spec.MachinesNeeded();

  // The ladder stopped the ranks to diagnose or replay: no restart until it
  // decides (an eviction meanwhile waits for the verdict).
  const bool held = state.ladder.state == LadderState::kDiagnosing || state.ladder.state == LadderState::kReplaying;

  // Observe and compare. Every active machine holds a slot, so the count
  // answers "does the world match?" without a scan; only a mismatch (rare)
  // looks at the slots.
  // Requeue mode (the baseline): a restart of a running job first gives
  // every machine back for the provisioning delay; RequeueDue grants it.
  const bool requeue = state.spec.recovery == JobSpec::Recovery::kRequeue && !state.placement.empty();
  const bool restart_needed = state.CountIn(MachineState::kActive) < needed || state.placement.empty() ||
                              state.restart_pending;
  const int release = state.releases.NextRestart();
  std::string release_note;
  if (release != state.releases.applied) release_note = " (release " + std::to_string(release) + ")";

  if (held) {
    // nothing: see above
  } else if (TrainsNarrower(state)) {
    std::optional<Action> grown = ContinueNarrower(state, JoinableStandbys(state, config, now), release_note, release);
    if (grown) {
      for (const MachineId& m : grown->placement.slots) {
        if (state.standbys.count(m)) out.push_back(ActivateAction(m, grown->placement.generation));
      }
      out.push_back(std::move(*grown));
    }
  } else if (requeue && restart_needed && !state.requeue_granted) {
    if (!state.requeue_until) {
      const std::string why = state.restart_pending ? state.restart_reason : "machines lost";
      out.push_back(RequeueAction(state.placement, now + state.spec.provisioning_delay,
                                  "requeue: all ranks stopped, machines back in " +
                                      FormatDuration(state.spec.provisioning_delay) + ": " + why));
    }
  } else if (state.CountIn(MachineState::kActive) < needed || state.placement.empty()) {
    std::vector<int> open = OpenSlots(state, needed);
    const std::vector<MachineId> usable = UsableStandbys(state);
    const int available = static_cast<int>(usable.size());
    // A narrower pipeline job grows by whole columns (NarrowerPipelineSlots),
    // not by filling slots in order, which would move its machines' stages.
    const bool narrower_pipelines = state.spec.elastic() && state.spec.pp > 1 && !state.placement.empty() &&
                                    static_cast<int>(state.placement.slots.size()) != needed;
    if (available >= static_cast<int>(open.size()) && !narrower_pipelines) {
      Placement next = state.placement;
      next.generation += 1;
      next.ranks_per_machine = state.spec.ranks_per_machine;
      next.slots.resize(needed);
      std::string reason = state.placement.empty() ? "start on " + std::to_string(needed) + " machine(s)"
                                                   : "replace";
      // The first start, with domains known: replicas packed under as few
      // switches as they fit, standbys spread (domain_placement.h).
      std::vector<MachineId> ordered = usable;
      if (state.placement.empty() && config.domain_aware_placement && static_cast<int>(open.size()) == needed) {
        std::vector<std::pair<MachineId, std::string>> pool;
        bool any = false;
        for (const MachineId& m : usable) {
          const MachineStatus* st = state.FindMachine(m);
          pool.push_back({m, st != nullptr ? st->domain : std::string()});
          any = any || !pool.back().second.empty();
        }
        if (any) ordered = DomainAwareSlots(pool, needed, std::max(1, state.spec.pp));
      }
      auto standby = ordered.begin();
      for (int slot : open) {
        if (!state.placement.empty()) {
          reason += " " + state.placement.slots[slot] + "->" + *standby;
        }
        next.slots[slot] = *standby;
        out.push_back(ActivateAction(*standby, next.generation));
        ++standby;
      }
      // Standbys in vacated slots take their ranks' places in the layout;
      // slots past a narrower job's end are joiners.
      if (state.spec.elastic() && state.spec.pp <= 1 && !state.placement.empty()) {
        next.ring = NextRing(state.placement, state.placement.slots, next.ranks_per_machine);
        while (next.ring.world() > 0 && next.ring.world() < next.world_size()) next.ring = next.ring.WithJoiner();
      } else {
        next.ring = {};
      }
      const bool same_size = !state.placement.empty() && state.placement.slots.size() == next.slots.size();
      out.push_back(RestartAllAction(std::move(next), state.checkpoint_step, reason + release_note, release, requeue));
      if (same_size) {
        out.back().slots_known = true;
        out.back().changed_slots = open;
      }
    } else if (state.spec.elastic() && !state.placement.empty()) {
      std::optional<Action> narrower = ContinueNarrower(state, usable, release_note, release);
      if (narrower) {
        for (const MachineId& m : narrower->placement.slots) {
          if (state.standbys.count(m)) out.push_back(ActivateAction(m, narrower->placement.generation));
        }
        out.push_back(std::move(*narrower));
      }
    } else {
      out.push_back(WaitForMachinesAction(static_cast<int>(open.size()) - available,
                                          state.placement.generation));
    }
  } else if (state.restart_pending) {
    Placement next = state.placement;
    next.generation += 1;
    out.push_back(RestartAllAction(std::move(next), state.checkpoint_step,
                                   (requeue ? "requeued: " : "reattempt in place: ") + state.restart_reason +
                                       release_note,
                                   release, requeue));
    out.back().slots_known = true;  // the same machines: no slot changes hands
  }

  // A drifting machine was found by the periodic check (policy_align.cc):
  // the restart discards every copy newer than the last clean check's step.
  if (state.rollback_to) {
    for (Action& a : out) {
      if (a.kind != ActionKind::kRestartAll) continue;
      a.rollback = a.fresh = true;
      a.restore_at_most = *state.rollback_to;
      a.reason += "; rolled back to step " + std::to_string(*state.rollback_to) + " at most";
    }
  }
  const StandbyReport pool = StandbyStatus(state, config);
  if (pool.deficit() > 0) {
    out.push_back(ReplenishStandbyAction(pool.deficit(), pool.target, state.standby_arrivals));
  }
  return out;
}

}  // namespace bulwark::controller
