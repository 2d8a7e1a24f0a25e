// The plane's reports for the CLI and for people: status (fleet, job,
// checkpoints, topology, detectors), incidents and the ledger, as JSON
// documents the CLI prints as they are (--json) or renders.
#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "plane/codec.h"
#include "plane/plane.h"

namespace bulwark::plane {
namespace {

using nlohmann::json;

// The job's in-memory checkpoints for `status`: each slot's backup peer and,
// rank by rank, who holds a copy of its shard at which step.
json CheckpointsJson(const Placement& p, const BackupPlan& plan, const std::vector<ShardHolding>& holdings) {
  json peers = json::array();
  for (size_t slot = 0; slot < plan.slots.size(); ++slot) {
    const SlotRoute& r = plan.slots[slot];
    peers.push_back({{"slot", slot}, {"machine", r.machine},
                     {"backup_machine", r.backup_machine.empty() ? json(nullptr) : json(r.backup_machine)}});
  }
  // Each rank's copies, in the order given (a scan of every holding per
  // rank is O(N^2) at N machines).
  std::map<RankId, std::vector<const ShardHolding*>> held;
  for (const ShardHolding& h : holdings) held[h.rank].push_back(&h);
  json ranks = json::array();
  for (RankId rank = 0; rank < p.world_size(); ++rank) {
    json primaries = json::array(), backups = json::array();
    auto copies = held.find(rank);
    for (const ShardHolding* h : copies == held.end() ? std::vector<const ShardHolding*>{} : copies->second) {
      (h->backup ? backups : primaries).push_back({{"machine", h->machine}, {"step", h->step}});
    }
    ranks.push_back({{"rank", rank}, {"machine", p.MachineOf(rank)}, {"primary", primaries}, {"backups", backups}});
  }
  return json{{"backup_peers", peers}, {"ranks", ranks}};
}

}  // namespace

json Plane::StatusJson(Time now) {
  PlaneLock lock(this);
  now = Now(now);
  json j{{"controller_up_s", ToMs(now - started_) / 1000.0}};
  if (!journal_error_.ok()) j["error"] = journal_error_.ToString();
  j["metrics"] = metrics_url_.empty() ? json(nullptr) : json(metrics_url_);
  json machines = json::array();
  for (const auto& [id, a] : agents_) {
    json shards = json::array();
    for (const ShardHolding& h : a.shards) {
      shards.push_back({{"rank", h.rank}, {"step", h.step}, {"copy", h.backup ? "backup" : "primary"}});
    }
    json m{{"id", id}, {"dir", a.dir}, {"last_heard_s_ago", ToMs(now - a.last_heard) / 1000.0},
           {"live_ranks", a.live_ranks}, {"generation", a.generation}, {"state", "registered"},
           {"shard_addr", a.shard_addr}, {"shards", shards}};
    if (!a.device_slowdown.empty()) m["device_slowdown"] = a.device_slowdown;
    if (!a.domain.empty()) m["rack"] = a.domain;  // its failure domain (bulwark up --racks)
    if (controller_) {
      if (const MachineStatus* s = controller_->state().FindMachine(id)) {
        m["state"] = MachineStateName(s->state);
        m["reason"] = s->last_reason;
        if (s->state == MachineState::kJoining && now - a.last_heard > options_.heartbeat_timeout) {
          m["reason"] = "returned, but its agent is silent: it joins when the agent runs again";
        }
      }
    }
    machines.push_back(m);
  }
  j["machines"] = machines;
  if (!controller_) {
    j["job"] = nullptr;
    return j;
  }
  const ClusterState& s = controller_->state();
  j["job"] = json{{"id", launch_->spec.id},
                  {"state", done_step_ ? "completed" : JobStateName(s.job)},
                  {"policy_state", JobStateName(s.job)},
                  {"world_size", launch_->spec.world_size},
                  {"recovery", RecoveryName(launch_->spec.recovery)},
                  // The ranks training now: below world_size while an elastic
                  // job runs on fewer machines than it needs.
                  {"training_world_size", s.placement.world_size()},
                  {"command", launch_->spec.command},
                  {"generation", s.placement.generation},
                  {"placement", s.placement.slots},
                  {"last_step", s.last_step},
                  {"done_step", done_step_ ? json(*done_step_) : json(nullptr)},
                  {"done_why", done_step_ ? json(done_why_) : json(nullptr)},
                  {"incidents", controller_->incidents().size()},
                  {"persist_every", launch_->persist_every},
                  {"durable_dir", launch_->durable_dir}};
  std::vector<ShardHolding> holdings;
  for (const auto& [id, a] : agents_) holdings.insert(holdings.end(), a.shards.begin(), a.shards.end());
  j["job"]["checkpoints"] = CheckpointsJson(s.placement, CurrentRoutesLocked().plan, holdings);
  // The parallel layout and its groups, rank by rank (topology.h).
  const Topology topo = launch_->spec.topology();
  json groups = json::array();
  for (const GroupKind k : {GroupKind::kTP, GroupKind::kPP, GroupKind::kDP}) {
    const int size = k == GroupKind::kTP ? topo.tp : k == GroupKind::kPP ? topo.pp : topo.dp();
    if (size < 2 || !topo.Validate().ok()) continue;
    for (int r = 0; r < topo.world; ++r) {
      // Each group once, from its member whose coordinate of the kind is 0
      // (building every rank's group was O(N^2) for a data-parallel job).
      const Topology::Coord c = topo.Of(r);
      if ((k == GroupKind::kTP ? c.tp : k == GroupKind::kPP ? c.pp : c.dp) != 0) continue;
      ParallelGroup g = topo.GroupOf(k, r);
      // The machines a group spans: what an over-eviction of it removes.
      std::vector<MachineId> machines;
      std::set<MachineId> spanned;
      const Placement& p = s.placement;
      for (int q : g.ranks) {
        if (p.ranks_per_machine <= 0 || q / p.ranks_per_machine >= static_cast<int>(p.slots.size())) continue;
        const MachineId& m = p.MachineOf(q);
        if (spanned.insert(m).second) machines.push_back(m);
      }
      groups.push_back({{"kind", GroupKindName(k)}, {"ranks", g.ranks}, {"machines", machines}});
    }
  }
  j["job"]["topology"] = {{"tp", topo.tp}, {"pp", topo.pp}, {"dp", topo.dp()}, {"groups", groups}};
  // What the implicit-fault detectors see now.
  j["job"]["detectors"] = {{"armed", monitors_.armed()},
                           {"hang_allowance_s", ToMs(monitors_.hang_allowance()) / 1000.0},
                           {"slow_round", monitors_.slow_round()},
                           {"slow_max_unflagged_ratio", monitors_.slow_max_unflagged()},
                           {"tracing", trace_ ? json(trace_->id) : json(nullptr)}};
  j["job"]["notes"] = s.notes;
  // The stop-time ladder (docs/ladder.md): where it stands.
  {
    const LadderStatus& l = s.ladder;
    json ladder{{"state", LadderStateName(l.state)}};
    if (l.state != LadderState::kIdle) {
      const auto& rungs = controller_->config().ladder.rungs;
      ladder["rung"] = l.rung >= 0 && l.rung < static_cast<int>(rungs.size()) ? rungs[l.rung]
                       : l.periodic                                            ? "periodic check"
                                                                               : "";
      ladder["trigger"] = l.trigger;
      ladder["incident"] = l.incident;
      if (l.deadline) ladder["deadline_in_s"] = static_cast<double>(ToMs(*l.deadline - now)) / 1000.0;
      ladder["answered"] = l.state == LadderState::kReplaying ? l.replay_results.size() : l.reports.size();
    }
    j["job"]["ladder"] = std::move(ladder);
  }
  const StandbyReport r = controller_->standby();
  j["standby"] = json{{"target", r.target}, {"available", r.available}, {"deficit", r.deficit()}};
  return j;
}

json Plane::IncidentsJson() {
  PlaneLock lock(this);
  return IncidentsLocked();
}

json Plane::IncidentsLocked() {
  json out = json::array();
  if (!controller_) return out;
  for (const Incident& i : controller_->incidents()) out.push_back(IncidentJson(i));
  return out;
}

json Plane::LedgerJson(Time now) {
  PlaneLock lock(this);
  return LedgerLocked(Now(now));
}

json Plane::LedgerLocked(Time now) {
  if (!controller_) return json{{"job", nullptr}};
  // The segments themselves, so a report can draw where the time went.
  json timeline = json::array();
  for (const LedgerSegment& s : controller_->Timeline(now)) {
    json seg = {{"start_ms", ToMs(s.start)}, {"end_ms", ToMs(s.end)}, {"category", TimeCategoryName(s.category)}};
    if (s.share < 1.0) seg["share"] = s.share;  // an elastic job below full width
    timeline.push_back(std::move(seg));
  }
  return json{{"job", launch_->spec.id},
              {"now_ms", ToMs(now)},
              {"window_s", ToMs(controller_->state().ledger.window()) / 1000.0},
              {"cumulative", BreakdownJson(controller_->Cumulative(now))},
              {"window", BreakdownJson(controller_->Window(now))},
              {"timeline", timeline}};
}

}  // namespace bulwark::plane
