// What agents report (Plane::Report): their liveness and holdings, the
// events they saw, the ranks' step signals for the detectors, and the ranks
// that exited 0, which complete the job once every rank of the generation
// has. Part of plane.cc's class; split out so that each file reads in one
// sitting.
#include <algorithm>

#include "controller/echo.h"
#include "plane/plane.h"

namespace bulwark::plane {
namespace {

using nlohmann::json;

Result<Event> EventFromAgent(const std::string& machine, const wire::AgentEvent& a) {
  const Time observed = TimeFromMs(a.observed_ms());
  switch (a.kind()) {
    case wire::AgentEvent::RANK_EXITED:
      return Event(RankExited{machine, a.rank(), a.exit_code(), a.signal(), a.signature(), observed, "",
                              a.unreachable_peer()});
    case wire::AgentEvent::INSPECTION_FAILED: {
      for (InspectionKind k : {InspectionKind::kDevice, InspectionKind::kDisk, InspectionKind::kMemory,
                               InspectionKind::kProcess}) {
        if (a.inspection() == InspectionKindName(k)) return Event(InspectionFailed{machine, k, a.detail(), observed});
      }
      return Status::InvalidArgument("agent " + machine + " reported unknown inspection '" + a.inspection() + "'");
    }
    case wire::AgentEvent::NETWORK_ALERT:
      return Event(NetworkAlert{machine, a.detail(), observed});
    case wire::AgentEvent::STEP:
      return Event(StepCompleted{a.step(), observed});
    case wire::AgentEvent::DIAGNOSTICS: {
      DiagnosticsReported d{a.incident(), machine, {}, a.alignment_hash(), observed, a.check()};
      for (const wire::TestResult& r : a.results()) d.results.push_back({r.test(), r.passed(), r.detail(), r.ms()});
      return Event(std::move(d));
    }
    case wire::AgentEvent::RELEASE_STAGED:
      return Event(ReleaseStaged{machine, a.release(), a.staged(), a.detail(), observed});
    case wire::AgentEvent::STANDBY_READY:
      return Event(StandbyReady{machine, a.staged(), a.detail(), observed});
    case wire::AgentEvent::RESTORED:
      return Event(CheckpointRestored{a.step(), a.source(), a.newest_step(), a.restore_ms(), observed});
    default:
      return Status::InvalidArgument("agent " + machine + " reported an event of unknown kind " +
                                     std::to_string(a.kind()));
  }
}

}  // namespace

namespace {
std::string HostOf(const std::string& addr) {
  const size_t colon = addr.rfind(':');
  return colon == std::string::npos ? addr : addr.substr(0, colon);
}
}  // namespace

MachineId Plane::OwnerOfAddressLocked(const std::string& addr) const {
  if (!controller_) return "";
  const std::string host = HostOf(addr);
  MachineId owner;
  for (const MachineId& m : controller_->state().placement.slots) {
    auto it = agents_.find(m);
    if (it == agents_.end() || it->second.shard_addr.empty() || HostOf(it->second.shard_addr) != host) continue;
    if (!owner.empty() && owner != m) return "";  // several machines share the host
    owner = m;
  }
  return owner;
}

std::unordered_map<MachineId, Time> Plane::ClosedSeenLocked() const {
  std::unordered_map<MachineId, Time> seen;
  if (!controller_) return seen;
  // Host -> the one placed machine that advertised it, "" when several did
  // (OwnerOfAddressLocked's rule, for every host at once).
  std::unordered_map<std::string, MachineId> owner;
  for (const MachineId& m : controller_->state().placement.slots) {
    auto it = agents_.find(m);
    if (it == agents_.end() || it->second.shard_addr.empty()) continue;
    auto [o, fresh] = owner.emplace(HostOf(it->second.shard_addr), m);
    if (!fresh && o->second != m) o->second.clear();
  }
  for (const auto& [other, a] : agents_) {
    if (LostLocked(other)) continue;
    for (const std::string& addr : a.peers_closed) {
      auto o = owner.find(HostOf(addr));
      if (o == owner.end() || o->second.empty() || o->second == other) continue;
      Time& t = seen[o->second];
      t = std::max(t, LastHeardLocked(other));
    }
  }
  return seen;
}

Result<int64_t> Plane::Report(const wire::ReportRequest& req, Time now) {
  PlaneLock lock(this);
  now = NowLocked(now);
  // Unacknowledged events stay with the agent until a restarted controller can journal them.
  if (!journal_error_.ok()) return journal_error_;
  Result<Agent*> a = ReportingAgentLocked(req);
  if (!a.ok()) return a.status();
  const bool was_lost = NoteReportLocked(req.machine(), **a, req, now);
  if (controller_) JoinIfNewLocked(req.machine(), was_lost, now);
  for (const wire::AgentEvent& ev : req.events()) {
    if (ev.seq() <= (*a)->acked_seq) continue;  // a resend of something applied
    (*a)->acked_seq = ev.seq();
    BULWARK_RETURN_IF_ERROR(ApplyAgentEventLocked(req.machine(), (*a)->incarnation, ev, now));
  }
  // The ranks' signals feed the detectors; only the current generation's,
  // and only while the job trains.
  if (controller_ && !done_step_) ObserveSignalsLocked(req, now);
  if (controller_ && req.ranks_wait_in_place() && !ranks_wait_in_place_ &&
      req.generation() == controller_->state().placement.generation) {
    // The job's program waits for an ASSIGN: its standbys can keep spares.
    ranks_wait_in_place_ = true;
    WarmStandbysLocked();
    WakeStreamsLocked();
  }
  // After the events: an exit they report may have restarted the job, and
  // the ranks that finished before it are then the old run's.
  BULWARK_RETURN_IF_ERROR(CompleteIfEveryRankExitedLocked(now));
  return (*a)->acked_seq;
}

Result<Plane::Agent*> Plane::ReportingAgentLocked(const wire::ReportRequest& req) {
  auto it = agents_.find(req.machine());
  if (it == agents_.end()) {
    return Status::FailedPrecondition("machine " + req.machine() + " reported before registering; register first");
  }
  Agent& a = it->second;
  if (a.incarnation != req.incarnation()) {
    return Status::FailedPrecondition("machine " + req.machine() + " reported as incarnation " +
                                      std::to_string(req.incarnation()) + " but registered as " +
                                      std::to_string(a.incarnation) + "; register again");
  }
  return &a;
}

bool Plane::NoteReportLocked(const std::string& machine, Agent& a, const wire::ReportRequest& req, Time now) {
  const bool was_lost = BackLocked(machine, now);
  a.reported = true;
  a.live_ranks.assign(req.live_ranks().begin(), req.live_ranks().end());
  a.generation = req.generation();
  if (req.device_slowdown() != a.device_slowdown) {
    if (!req.device_slowdown().empty()) LogLocked(req.machine() + " reports a device slowdown: " + req.device_slowdown());
    a.device_slowdown = req.device_slowdown();
  }
  // The agent's current holdings, not a delta: copies it dropped are gone.
  std::vector<ShardHolding> shards;
  shards.reserve(req.shards_size());
  for (const wire::ShardCopy& c : req.shards()) shards.push_back({req.machine(), c.rank(), c.step(), c.backup()});
  const bool same = shards.size() == a.shards.size() &&
                    std::equal(shards.begin(), shards.end(), a.shards.begin(), [](const ShardHolding& x, const ShardHolding& y) {
                      return x.rank == y.rank && x.step == y.step && x.backup == y.backup && x.machine == y.machine;
                    });
  if (!same || (was_lost && !shards.empty())) RoutesChangedLocked();
  a.shards = std::move(shards);
  a.finished.clear();
  for (const wire::FinishedRank& f : req.finished()) a.finished[f.rank()] = f.step();
  a.peers_closed.assign(req.peers_closed().begin(), req.peers_closed().end());
  return was_lost;
}

void Plane::JoinIfNewLocked(const MachineId& machine, bool was_lost, Time now) {
  const MachineStatus* m = controller_->state().FindMachine(machine);
  // A machine the job has not seen, or one an operator returned, joins
  // once it reports: the local backend's self-check is its agent being up.
  if (m == nullptr || m->state == MachineState::kJoining) {
    // Where the server proves machines reachable (issue 40), a machine
    // joins once it was reached at the address its ranks will listen on
    // (ProbeDone joins it then), never on its word alone.
    Agent& a = AgentForLocked(machine);
    if (options_.probe_reachability && !a.shard_addr.empty()) {
      if (!a.reached) return;
      a.reached = false;  // one proof, one join: a returned machine proves itself again
      FeedLocked(MachineJoined{machine, true, "agent reporting, reached at " + a.shard_addr, now, a.domain}, now,
                 nullptr);
      return;
    }
    FeedLocked(MachineJoined{machine, true, "agent reporting", now, AgentForLocked(machine).domain}, now, nullptr);
  } else if (was_lost && m->state == MachineState::kEvicted && m->lost_with_domain) {
    // Its switch is back (policy_domains.cc): its agent reporting again is
    // the local backend's self-check, and the policy returns it as a standby.
    FeedLocked(MachineJoined{machine, true, "agent reporting again: its switch is back", now, AgentForLocked(machine).domain},
               now, nullptr);
  } else if (was_lost) {
    LogLocked("machine " + machine + " is heard from again; it stays " + MachineStateName(m->state));
  }
}

std::vector<Plane::ReachProbe> Plane::ProbesDue(Time now) {
  PlaneLock lock(this);
  now = NowLocked(now);
  std::vector<ReachProbe> due;
  if (!options_.probe_reachability || !controller_ || done_step_) return due;
  for (auto& [id, a] : agents_) {
    if (a.probing || a.shard_addr.empty() || LostLocked(id) || !liveness_.OnLease(id)) continue;
    const MachineStatus* m = controller_->state().FindMachine(id);
    const bool joining = (m == nullptr || m->state == MachineState::kJoining) && !a.reached;
    const bool standby = m != nullptr && m->state == MachineState::kStandby &&
                         now - a.probed_at >= options_.reprobe_standby_every;
    if (!joining && !standby) continue;
    a.probing = true;
    a.probe_started = now;
    due.push_back({id, a.incarnation, a.shard_addr});
  }
  return due;
}

void Plane::ProbeDone(const ReachProbe& probe, const Status& reached, Time now) {
  PlaneLock lock(this);
  now = NowLocked(now);
  auto it = agents_.find(probe.machine);
  if (it == agents_.end()) return;
  Agent& a = it->second;
  a.probing = false;
  // A new run of the agent, or one at another address, is probed afresh.
  if (a.incarnation != probe.incarnation || a.shard_addr != probe.addr) return;
  a.probed_at = now;
  if (!controller_ || done_step_) return;
  const MachineStatus* m = controller_->state().FindMachine(probe.machine);
  const bool joining = m == nullptr || m->state == MachineState::kJoining;
  if (m != nullptr && !joining && m->state != MachineState::kStandby) return;  // taken or evicted meanwhile
  // Lost and back meanwhile (its switch went down and up during the probe):
  // the probe tested the machine's earlier life, and the next one tests this.
  if (m != nullptr && m->state_since > a.probe_started) return;
  if (reached.ok()) {
    if (!joining) return;
    a.reached = true;
    JoinIfNewLocked(probe.machine, false, now);
    return;
  }
  // A dead agent does not answer either; its lost heartbeat is the better
  // account of it. Only a machine still reporting is unreachable: one
  // silent for two report periods went silent during the probe (a switch
  // that took its rack down: the domain's rule returns it, this would not).
  const Time heard = LastHeardLocked(probe.machine);
  if (heard <= a.probe_started || now - heard > std::chrono::milliseconds(1000)) {
    LogLocked("machine " + probe.machine + " was not reached at " + probe.addr + ", but its agent is silent too: " +
        "not held against it");
    return;
  }
  const std::string why = "peers cannot reach " + probe.machine + " at " + probe.addr + " (" + reached.message() +
                          "); it is not given ranks: check its firewall, routes and --address";
  LogLocked(why);
  FeedLocked(MachineJoined{probe.machine, false, why, now, a.domain}, now, nullptr);
}

Status Plane::ApplyAgentEventLocked(const MachineId& machine, int64_t incarnation, const wire::AgentEvent& ev,
                                    Time now) {
  const json origin{{"machine", machine}, {"incarnation", incarnation}, {"seq", ev.seq()}};
  if (ev.kind() == wire::AgentEvent::JOB_DONE) {
    if (!done_step_ && launch_) return CompleteLocked(ev.step(), "rank 0 printed its done line", origin, now);
    return Status::OK();
  }
  // A finished job has nothing left to protect: its ranks' exits and its
  // machines' faults are no longer incidents.
  if (done_step_ || !controller_) return Status::OK();
  // Steps and restores read from a previous generation's ranks (read
  // before the agent applied the restart) are not the current run's, and
  // an exit of one is part of the episode the restart already answers
  // (both ranks of a release that cannot start fail; the first exit
  // rolls it back, the second must not roll back again): an echo
  // (controller/echo.h). Generation 0: an agent that does not say.
  const int64_t generation = controller_->state().placement.generation;
  const bool old_generation = ev.generation() != generation;
  if ((ev.kind() == wire::AgentEvent::STEP || ev.kind() == wire::AgentEvent::RESTORED) && old_generation) {
    return Status::OK();
  }
  if (ev.kind() == wire::AgentEvent::RANK_EXITED &&
      ClassifyExit({ev.generation(), TimeFromMs(ev.observed_ms()), /*peer_lost=*/false}, {generation, {}}, now,
                   Duration(0)) == ExitVerdict::kEcho) {
    LogLocked("rank " + std::to_string(ev.rank()) + " on " + machine + " of generation " + std::to_string(ev.generation()) +
        " exited after the restart to generation " + std::to_string(generation) + ": part of the episode it answers");
    return Status::OK();
  }
  Result<Event> e = EventFromAgent(machine, ev);
  if (!e.ok()) {
    LogLocked(e.status().ToString());
    return Status::OK();
  }
  // Resolved here, once, and journaled with the event: a replay must blame
  // the machine that owned the address then, whatever registered since.
  if (auto* x = std::get_if<RankExited>(&*e); x != nullptr && !x->unreachable_addr.empty()) {
    x->unreachable = OwnerOfAddressLocked(x->unreachable_addr);
  }
  FeedLocked(*e, now, origin);
  return Status::OK();
}

void Plane::ObserveSignalsLocked(const wire::ReportRequest& req, Time now) {
  const ClusterState& s = controller_->state();
  for (const wire::RankSignal& r : req.signals()) {
    if (r.generation() != s.placement.generation) continue;
    const Time at = std::min(TimeFromMs(r.observed_ms()), now);
    if (r.steps() == 0) {
      if (!r.phase().empty()) {
        monitors_->Observe(RankPhase{req.machine(), r.rank(), r.phase(), Duration(static_cast<int64_t>(r.phase_ms())), at,
                                    r.step()});
      }
      continue;
    }
    if (r.halted().empty()) highest_step_ = std::max(highest_step_, r.step());
    RankSignal sig;
    CopyFromMessage(r, &sig);
    sig.machine = req.machine();
    sig.rank = r.rank();
    sig.observed = at;
    monitors_->Observe(sig);
    // Rank 0 counts the job's tokens; a held-back step processed none.
    if (r.rank() == 0 && r.halted().empty()) throughput_.Add(r.tokens(), r.step_ms());
  }
  if (!req.signals().empty()) CheckMonitorsLocked(now);
}

Status Plane::CompleteIfEveryRankExitedLocked(Time now) {
  if (!controller_ || !launch_ || done_step_ || !journal_error_.ok()) return Status::OK();
  const ClusterState& s = controller_->state();
  const Placement& p = s.placement;
  if (p.empty() || p.generation == 0) return Status::OK();
  int64_t step = std::max(s.last_step, highest_step_);
  for (int r = 0; r < p.world_size(); ++r) {
    auto a = agents_.find(p.MachineOf(r));
    if (a == agents_.end() || a->second.generation != p.generation) return Status::OK();
    auto f = a->second.finished.find(r);
    if (f == a->second.finished.end()) return Status::OK();
    step = std::max(step, f->second);
  }
  std::string why = "every rank of generation " + std::to_string(p.generation) + " exited 0";
  // Nothing it printed matched: a progress pattern that never matches, or a
  // program that ended at once. Done all the same, and said so.
  if (step == 0) why += " before any step was seen";
  return CompleteLocked(step, why, json(nullptr), now);
}

Status Plane::CompleteLocked(int64_t step, const std::string& why, const json& origin, Time now) {
  done_step_ = step;
  done_why_ = why;
  json record = origin.is_object() ? origin : json::object();
  record["type"] = "done";
  record["step"] = step;
  record["why"] = why;
  // A failed append is the sticky journal error, as for every decision.
  BULWARK_RETURN_IF_ERROR(JournalLocked(record, now));
  LogLocked("job " + launch_->spec.id + " finished at step " + std::to_string(step) + ": " + why);
  monitors_->Stop();
  // The done row is journaled: a restart replays it, snapshot or not.
  if (Status st = SaveSnapshotsLocked(now); !st.ok()) LogLocked("after the job finished: " + st.ToString());
  return Status::OK();
}

}  // namespace bulwark::plane
