// The plane's reports for the CLI and for people: status (fleet, job,
// checkpoints, topology, detectors), incidents and the ledger, as JSON
// documents the CLI prints as they are (--json) or renders.
#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "controller/policy_json.h"
#include "plane/codec.h"
#include "plane/plane.h"
#include "plane/status_view.h"

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

// The parallel layout and its groups, rank by rank (topology.h), each with
// the machines it spans: what an over-eviction of it removes.
json TopologyJson(const JobSpec& spec, const Placement& p) {
  const Topology topo = spec.topology();
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
      std::vector<MachineId> machines;
      std::set<MachineId> spanned;
      for (int q : g.ranks) {
        if (p.ranks_per_machine <= 0 || q / p.ranks_per_machine >= static_cast<int>(p.slots.size())) continue;
        const MachineId& m = p.MachineOf(q);
        if (spanned.insert(m).second) machines.push_back(m);
      }
      groups.push_back({{"kind", GroupKindName(k)}, {"ranks", g.ranks}, {"machines", machines}});
    }
  }
  return {{"tp", topo.tp}, {"pp", topo.pp}, {"dp", topo.dp()}, {"groups", groups}};
}

json MachineJson(const StatusView::Machine& a) {
  json shards = json::array();
  for (const ShardHolding& h : a.shards) {
    shards.push_back({{"rank", h.rank}, {"step", h.step}, {"copy", h.backup ? "backup" : "primary"}});
  }
  json m{{"id", a.id}, {"dir", a.dir}, {"last_heard_s_ago", a.last_heard_s_ago},
         {"live_ranks", a.live_ranks}, {"generation", a.generation}, {"state", a.state},
         {"shard_addr", a.shard_addr}, {"shards", shards}};
  if (!a.device_slowdown.empty()) m["device_slowdown"] = a.device_slowdown;
  if (!a.domain.empty()) m["rack"] = a.domain;  // its failure domain (bulwark up --racks)
  if (a.reason) m["reason"] = *a.reason;
  return m;
}

json JobJson(const StatusView::Job& v) {
  json j{{"id", v.spec.id},
         {"state", v.state},
         {"policy_state", v.policy_state},
         {"world_size", v.spec.world_size},
         {"recovery", RecoveryName(v.spec.recovery)},
         // The ranks training now: below world_size while an elastic
         // job runs on fewer machines than it needs.
         {"training_world_size", v.placement.world_size()},
         {"command", v.spec.command},
         {"generation", v.placement.generation},
         {"placement", v.placement.slots},
         {"last_step", v.last_step},
         {"done_step", v.done_step ? json(*v.done_step) : json(nullptr)},
         {"done_why", v.done_step ? json(v.done_why) : json(nullptr)},
         {"incidents", v.incidents},
         {"persist_every", v.persist_every},
         {"durable_dir", v.durable_dir}};
  j["checkpoints"] = CheckpointsJson(v.placement, v.plan, v.holdings);
  j["topology"] = TopologyJson(v.spec, v.placement);
  // What the implicit-fault detectors see now.
  j["detectors"] = {{"armed", v.armed},
                    {"hang_allowance_s", v.hang_allowance_s},
                    {"slow_round", v.slow_round},
                    {"slow_max_unflagged_ratio", v.slow_max_unflagged},
                    {"slow_max_unflagged_long_ratio", v.slow_max_unflagged_long},
                    {"tracing", v.tracing ? json(*v.tracing) : json(nullptr)}};
  j["notes"] = v.notes;
  // The stop-time ladder (docs/ladder.md): where it stands.
  json ladder{{"state", v.ladder.state}};
  if (!v.ladder.idle) {
    ladder["rung"] = v.ladder.rung;
    ladder["trigger"] = v.ladder.trigger;
    ladder["incident"] = v.ladder.incident;
    if (v.ladder.deadline_in_s) ladder["deadline_in_s"] = *v.ladder.deadline_in_s;
    ladder["answered"] = v.ladder.answered;
  }
  j["ladder"] = std::move(ladder);
  // What the job runs with: the cluster's policy and its job file's fields.
  j["policy"] = controller::PolicyJson(v.policy);
  j["align_check"] = {{"every_s", v.align.every_s},
                      {"checks", v.align.checks},
                      {"clean", v.align.clean},
                      {"in_flight", v.align.in_flight ? json(v.align.in_flight) : json(nullptr)},
                      {"last", v.align.last},
                      {"clean_step", v.align.clean_step}};
  return j;
}

}  // namespace

json RenderStatus(const StatusView& v) {
  json j{{"controller_up_s", v.up_s}};
  if (!v.error.empty()) j["error"] = v.error;
  j["metrics"] = v.metrics_url.empty() ? json(nullptr) : json(v.metrics_url);
  j["policy"] = controller::PolicyJson(v.policy);
  json machines = json::array();
  for (const StatusView::Machine& m : v.machines) machines.push_back(MachineJson(m));
  j["machines"] = std::move(machines);
  if (!v.job) {
    j["job"] = nullptr;
    return j;
  }
  j["job"] = JobJson(*v.job);
  j["standby"] = json{{"target", v.job->standby.target}, {"available", v.job->standby.available},
                      {"deficit", v.job->standby.deficit()}};
  return j;
}

// Copies what the status shows under the lock; renders it after.
json Plane::StatusJson(Time now) {
  StatusView v;
  {
    PlaneLock lock(this);
    now = NowLocked(now);
    v.up_s = ToMs(now - started_) / 1000.0;
    if (!journal_error_.ok()) v.error = journal_error_.ToString();
    v.metrics_url = metrics_url_;
    v.policy = controller::ChangedPolicy(cluster_policy_);
    v.machines.reserve(agents_.size());
    for (const auto& [id, a] : agents_) {
      StatusView::Machine m;
      m.id = id;
      m.dir = a.dir;
      m.shard_addr = a.shard_addr;
      m.device_slowdown = a.device_slowdown;
      m.domain = a.domain;
      m.last_heard_s_ago = ToMs(now - LastHeardLocked(id)) / 1000.0;
      m.live_ranks = a.live_ranks;
      m.generation = a.generation;
      m.shards = a.shards;
      if (controller_) {
        if (const MachineStatus* s = controller_->state().FindMachine(id)) {
          m.state = MachineStateName(s->state);
          m.reason = s->last_reason;
          if (s->state == MachineState::kJoining && now - LastHeardLocked(id) > options_.heartbeat_timeout) {
            m.reason = "returned, but its agent is silent: it joins when the agent runs again";
          }
        }
      }
      v.machines.push_back(std::move(m));
    }
    if (controller_) v.job = JobViewLocked(now);
  }
  return RenderStatus(v);
}

StatusView::Job Plane::JobViewLocked(Time now) {
  const ClusterState& s = controller_->state();
  StatusView::Job j;
  j.spec = launch_->spec;
  j.persist_every = launch_->persist_every;
  j.durable_dir = launch_->durable_dir;
  j.state = done_step_ ? "completed" : JobStateName(s.job);
  j.policy_state = JobStateName(s.job);
  j.placement = s.placement;
  j.last_step = s.last_step;
  j.done_step = done_step_;
  j.done_why = done_why_;
  j.incidents = controller_->incidents().size();
  j.plan = CurrentRoutesLocked().plan;
  for (const auto& [id, a] : agents_) j.holdings.insert(j.holdings.end(), a.shards.begin(), a.shards.end());
  j.armed = monitors_->armed();
  j.hang_allowance_s = ToMs(monitors_->hang_allowance()) / 1000.0;
  j.slow_round = monitors_->slow_round();
  j.slow_max_unflagged = monitors_->slow_max_unflagged();
  j.slow_max_unflagged_long = monitors_->slow_max_unflagged_long();
  if (trace_) j.tracing = trace_->id;
  j.notes = s.notes;
  const LadderStatus& l = s.ladder;
  j.ladder.state = LadderStateName(l.state);
  j.ladder.idle = l.state == LadderState::kIdle;
  if (!j.ladder.idle) {
    const auto& rungs = controller_->config().ladder.rungs;
    j.ladder.rung = l.rung >= 0 && l.rung < static_cast<int>(rungs.size()) ? rungs[l.rung]
                    : l.periodic                                            ? l.check
                                                                            : "";
    j.ladder.trigger = l.trigger;
    j.ladder.incident = l.incident;
    if (l.deadline) j.ladder.deadline_in_s = static_cast<double>(ToMs(*l.deadline - now)) / 1000.0;
    j.ladder.answered = l.state == LadderState::kReplaying ? l.replay_results.size() : l.answers_in;
  }
  j.align = {ToMs(controller_->config().ladder.align_every) / 1000.0, s.align.started, s.align.clean, s.align.id,
             s.align.last, s.align.clean_step};
  j.standby = controller_->standby();
  j.policy = controller::ChangedPolicy(options_.policy);
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
  return LedgerLocked(NowLocked(now));
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
