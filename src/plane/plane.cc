#include "plane/plane.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "plane/actuator.h"
#include "plane/codec.h"
#include "plane/kill_point.h"
#include "controller/policy.h"
#include "common/files.h"

namespace bulwark::plane {
namespace {

using nlohmann::json;

// A STOP_RANKS that only stops: a warm standby's carries the job's command.
bool IsPlainStop(const wire::Command& c) { return c.kind() == wire::Command::STOP_RANKS && c.argv_size() == 0; }

}  // namespace

void Plane::LogLocked(const std::string& line) { log_.Info(options_.log_prefix + line); }

void Plane::LogLongHold(const char* who, std::chrono::steady_clock::duration held) {
  log_.Info(std::string("plane lock held ") + FormatDuration(std::chrono::duration_cast<Duration>(held)) + " by " +
            who + ": reports and the tick waited");
}

Time Plane::NowLocked(Time now) {
  // The policy refuses time going backwards; the wall clock may step back.
  if (now < last_now_) now = last_now_;
  last_now_ = now;
  return now;
}

Result<std::unique_ptr<Plane>> Plane::Open(PlaneOptions options, Time now) {
  BULWARK_RETURN_IF_ERROR(options.policy.Validate());
  Result<std::unique_ptr<JournalStore>> store =
      options.open_journal ? options.open_journal(options.create) : OpenSqliteJournal(options.db_path, options.create);
  if (!store.ok()) return store.status();
  std::unique_ptr<Plane> p(new Plane(std::move(options)));
  {
    // Nobody else holds it yet; the lock costs nothing and keeps every
    // access to the plane's state under mu_ (make lint checks it).
    MutexLock lock(&p->mu_);
    p->store_ = std::move(*store);
    p->started_ = now;
    BULWARK_RETURN_IF_ERROR(p->RebuildLocked(now));
    p->ReconcileBackendLocked();
  }
  return p;
}

Plane::Agent& Plane::AgentForLocked(const std::string& machine) {
  liveness_.Add(machine);  // every agent has its record there
  return agents_[machine];
}

BackupPlan Plane::PlanLocked(const Placement& placement) const {
  std::map<MachineId, std::string> addrs;
  std::vector<ShardHolding> holdings;
  for (const auto& [id, a] : agents_) {
    if (!a.shard_addr.empty()) addrs[id] = a.shard_addr;
    if (!LostLocked(id)) holdings.insert(holdings.end(), a.shards.begin(), a.shards.end());
  }
  Topology layout = controller_ ? controller_->state().spec.topology() : Topology{};
  layout.world = placement.world_size();
  return PlanBackups(placement, layout, addrs, holdings);
}

const Plane::Routes& Plane::CurrentRoutesLocked() {
  const Placement empty;
  const Placement& p = controller_ ? controller_->state().placement : empty;
  if (routes_ && routes_->version == routes_version_ && routes_->generation == p.generation) return *routes_;
  Routes r;
  r.version = routes_version_;
  r.generation = p.generation;
  r.plan = PlanLocked(p);
  for (size_t slot = 0; slot < p.slots.size(); ++slot) r.slots_of[p.slots[slot]].push_back(slot);
  routes_ = std::move(r);
  return *routes_;
}

std::string Plane::MasterAddrLocked(const MachineId& machine) const {
  auto it = agents_.find(machine);
  const std::string addr = it == agents_.end() ? "" : it->second.shard_addr;
  const size_t colon = addr.rfind(':');
  const std::string host = colon == std::string::npos ? "" : addr.substr(0, colon);
  if (host.empty() || host == "127.0.0.1" || host == "localhost") return launch_->master_addr;
  return host;
}

Status Plane::AfterDecisionLocked(const std::vector<Action>& actions, bool deliver, Time now) {
  if (!actions.empty()) RoutesChangedLocked();
  monitors_->AfterActions(actions, now, controller_ ? controller_->state().spec.topology() : Topology{});
  for (const Action& a : actions) {
    if (a.kind == ActionKind::kWaitForMachines) last_wait_ = a.count;
    // One job of a fleet asks the fleet's pool (fleet.h), off the lock.
    if (deliver && a.kind == ActionKind::kWaitForMachines && options_.wants_machines && a.count > 0) {
      deferred_.push_back([want = options_.wants_machines, n = a.count, now] { want(n, now); });
    }
    if (a.kind == ActionKind::kCaptureStacks) {
      // A replayed trace is history: its verdict is in the journal.
      if (!deliver) continue;
      Trace t;
      t.id = a.id;
      t.incident = a.incident;
      t.started = now;
      t.deadline = now + options_.policy.trace_deadline;
      t.placement = a.placement;
      for (const MachineId& m : a.placement.slots) {
        t.waiting.insert(m);
        wire::Command c;
        c.set_kind(wire::Command::TRACE);
        c.set_id(a.id);
        c.set_generation(a.placement.generation);
        c.set_reason(a.reason);
        AgentForLocked(m).oneshots.push_back(std::move(c));
      }
      t.crowds = t.waiting.size() >= options_.capture_crowds;
      trace_ = std::move(t);
      continue;
    }
    if (a.kind == ActionKind::kRunDiagnostics) {
      diagnose_decided_ = a;
      if (deliver) SendDiagnoseLocked(a);
    }
    if (a.kind == ActionKind::kCheckup || a.kind == ActionKind::kAlignCheck) {
      // An over-evicted machine's checkup (policy_checkup.cc): the ladder's
      // tests as a DIAGNOSE one-shot to its agent alone, off the job's path;
      // its answer returns it to the pool or keeps it out. A replayed one
      // is not sent again: the machine waits for an operator. The periodic
      // bitwise check (policy_align.cc): the alignment test beside the
      // ranks; a replayed one is judged at its deadline on what came back.
      if (deliver) SendTestsLocked(a);
      continue;
    }
    if (a.kind == ActionKind::kStageRelease) {
      // A replayed staging is history: the restart it led to is journaled.
      if (deliver) SendStageReleaseLocked(a);
      continue;
    }
    // A repeated decision (same id) is a no-op everywhere; log it once.
    if (deliver && logged_actions_.insert(a.id).second) LogLocked("action " + a.ToString());
    if (deliver) ActuateBackendLocked(a);
    // Routes come from the holdings reported now. On replay nothing has been
    // reported yet, so a replayed restart carries peers but no sources; the
    // agents already carry it out and ignore the resent id anyway.
    const BackupPlan routes = a.kind == ActionKind::kRestartAll ? PlanLocked(a.placement) : BackupPlan{};
    JobLaunch launch = a.kind == ActionKind::kRestartAll ? LaunchForLocked(a.release) : *launch_;
    if (a.kind == ActionKind::kRestartAll && !a.placement.slots.empty()) {
      launch.master_addr = MasterAddrLocked(a.placement.slots[0]);
    }
    std::vector<MachineCommand> commands = Actuate(a, launch, controller_->state().placement, routes);
    if (a.kind == ActionKind::kRestartAll) {
      std::map<MachineId, std::string> ring_addrs;
      for (const MachineId& m : a.placement.slots) {
        if (auto it = agents_.find(m); it != agents_.end()) ring_addrs[m] = it->second.ring_addr;
      }
      AddRingPlans(commands, launch, a.placement, ring_addrs);
    }
    // A job stopped again (waiting for machines, one more lost) leaves a
    // stopped machine as it is: its command, and so its id, stays, and its
    // stream writes nothing. With a new id each time, every eviction of a
    // waiting job wrote 12,499 STOP_RANKS at 12,500 machines (issue 36).
    const bool restop = a.kind == ActionKind::kWaitForMachines || a.kind == ActionKind::kStopJob;
    for (MachineCommand& mc : commands) {
      if (mc.command.kind() == wire::Command::START_RANKS) {
        mc.command.set_spike_factor(options_.policy.spike_factor);
        mc.command.set_spike_rule(options_.policy.spike_rule().Encode());
        mc.command.set_process_stuck_ms(ToMs(options_.policy.process_stuck));
      }
      Agent& target = AgentForLocked(mc.machine);
      if (restop && target.desired && IsPlainStop(*target.desired) && IsPlainStop(mc.command)) continue;
      target.desired = std::move(mc.command);
    }
  }
  if (deliver) {
    WarmStandbysLocked();
    WakeStreamsLocked();
  }
  return Status::OK();
}

void Plane::WarmStandbysLocked() {
  if (!controller_ || !launch_) return;
  const ClusterState& s = controller_->state();
  // The requeue baseline acquires its machines cold: no warm spares.
  const bool requeue = s.spec.recovery == JobSpec::Recovery::kRequeue;
  if ((s.job != JobState::kRunning && s.job != JobState::kRestarting) || s.placement.empty() || requeue) {
    // No job to be warm for (it completed, stopped or waits for machines):
    // the spares go.
    for (const MachineId& m : s.standbys) {
      Agent& a = AgentForLocked(m);
      if (!a.desired || a.desired->kind() != wire::Command::STOP_RANKS || a.desired->argv_size() == 0) continue;
      wire::Command idle;
      idle.set_kind(wire::Command::STOP_RANKS);
      idle.set_id(a.desired->id() + "/idle");
      idle.set_reason("standby, idle: the job is not running");
      a.desired = std::move(idle);
    }
    return;
  }
  for (const MachineId& m : s.standbys) {
    Agent& a = AgentForLocked(m);
    // Only an idle standby: nothing asked of it yet, or a stop; or ranks
    // of a generation it has left (a pipeline that lost a machine gives
    // its other machines back: cluster_state.cc), which this stops.
    if (a.desired && a.desired->kind() != wire::Command::STOP_RANKS &&
        a.desired->kind() != wire::Command::START_RANKS) {
      continue;
    }
    // Warm for the release the ranks run (a hot update changes it, and
    // with it the command's id, so that the agent takes it anew).
    wire::Command warm = WarmStandby(LaunchForLocked(s.releases.applied), s.placement, options_.policy.spike_factor);
    // Once the ranks said they wait in place, any program's spares do
    // (a new id: the agent takes it anew).
    warm.set_waits_in_place(ranks_wait_in_place_);
    warm.set_id(warm.id() + "/r" + std::to_string(s.releases.applied) + (ranks_wait_in_place_ ? "/w" : ""));
    warm.set_spike_rule(options_.policy.spike_rule().Encode());
    if (a.desired && a.desired->id() == warm.id()) continue;
    a.desired = std::move(warm);
  }
}

Status Plane::HandleLocked(const Event& e, Time now, const json& origin) {
  if (!controller_) return Status::FailedPrecondition("no job is submitted yet");
  if (!journal_error_.ok()) return journal_error_;
  Result<std::vector<Action>> actions = controller_->Handle(e, now);
  if (!actions.ok()) {
    LogLocked("event refused by the policy: " + Describe(e) + ": " + actions.status().ToString());
    if (!origin.is_null()) {
      // Still remember it was seen, so that a restart does not apply it later.
      json record = origin;
      record["type"] = "origin";
      BULWARK_RETURN_IF_ERROR(JournalLocked(record, now));
    }
    return actions.status();
  }
  json record{{"type", "event"}, {"event", EncodeEvent(e)}};
  if (!origin.is_null()) record["origin"] = origin;
  // Journal before acting: a decision that was acted on is always replayed.
  BULWARK_RETURN_IF_ERROR(JournalLocked(record, now));
  if (KindOf(e) != EventKind::kStepCompleted) LogLocked("event " + Describe(e));
  KillPointJournaled(EventKindName(KindOf(e)));
  Status after = Status::OK();
  if (++appended_since_compaction_ >= kCompactEvery) after = CompactJournalLocked(now);
  if (after.ok()) after = AfterDecisionLocked(*actions, /*deliver=*/true, now);
  if (after.ok() && (KindOf(e) != EventKind::kStepCompleted || !actions->empty())) after = SaveSnapshotsLocked(now);
  if (!after.ok()) LogLocked("after journaling " + Describe(e) + ": " + after.ToString());
  return after;
}

void Plane::FeedAllLocked(const std::vector<Event>& events, Time now) {
  if (events.size() == 1) return FeedLocked(events[0], now, nullptr);
  if (events.empty() || !controller_ || !journal_error_.ok()) return;
  std::vector<std::pair<size_t, Status>> refused;
  Result<std::vector<Action>> actions = controller_->HandleAll(events, now, &refused);
  if (!actions.ok()) {
    LogLocked("events refused by the policy: " + actions.status().ToString());
    return;
  }
  json list = json::array();
  for (const Event& e : events) list.push_back(EncodeEvent(e));
  // Journal before acting; replay decides the same events together again.
  if (!JournalLocked(json{{"type", "events"}, {"events", list}}, now).ok()) return;
  for (const Event& e : events) LogLocked("event " + Describe(e));
  for (const auto& [i, st] : refused) LogLocked("event refused by the policy: " + Describe(events[i]) + ": " + st.ToString());
  Status after = AfterDecisionLocked(*actions, /*deliver=*/true, now);
  if (after.ok()) after = SaveSnapshotsLocked(now);
  if (!after.ok()) LogLocked("after journaling " + std::to_string(events.size()) + " events: " + after.ToString());
}

void Plane::FeedLocked(const Event& e, Time now, const json& origin) {
  // Nobody waits on the answer, and HandleLocked has logged any failure; a
  // journal failure also stops all further deciding (journal_error_).
  HandleLocked(e, now, origin).IgnoreError();
}

Status Plane::JournalLocked(const json& record, Time now) {
  Status st = store_->Append(launch_->spec.id, ToMs(now), record.dump());
  if (st.ok()) return st;
  // The policy has changed its state but the journal does not say so:
  // acting now could never be replayed. Keep the first error and decide
  // nothing more (LevelDB's sticky background error).
  journal_error_ = st.Annotate("controller stopped deciding (journal not written)");
  LogLocked(journal_error_.ToString() + "; fix the disk, then restart the controller: it replays the journal");
  return journal_error_;
}

Status Plane::Register(const wire::RegisterRequest& req, Time now) {
  PlaneLock lock(this);
  now = NowLocked(now);
  if (req.machine().empty()) return Status::InvalidArgument("register: machine id is empty");
  // Refused before anything is recorded: a machine its peers cannot reach
  // must never become a standby (issue 40).
  if (Status st = CheckAdvertisedAddress(options_.addresses, req.machine(), req.shard_addr()); !st.ok()) {
    LogLocked(st.message());
    return st;
  }
  Agent& a = AgentForLocked(req.machine());
  // An agent registering again where it was (after a controller restart,
  // every agent does) changes nothing a restart reads: no write, and no
  // fsync under the lock (12,500 of them took 15 s).
  if (!a.stored || a.dir != req.machine_dir() || a.shard_addr != req.shard_addr()) {
    a.stored = false;
    BULWARK_RETURN_IF_ERROR(
        store_->PutMachine({req.machine(), req.machine_dir(), ToMs(now), req.shard_addr()}));
    a.stored = true;
  }
  a.dir = req.machine_dir();
  if (a.shard_addr != req.shard_addr()) a.reached = false;  // proved at another address
  // Routes name holders of copies (and their addresses): an agent that
  // holds none changes none of them by registering.
  if (!a.shards.empty()) RoutesChangedLocked();
  a.shard_addr = req.shard_addr();
  a.domain = req.domain();
  liveness_.SetDomain(req.machine(), a.domain);
  a.ring_addr = req.ring_addr();
  if (a.incarnation != req.incarnation()) {
    a.reached = false;
    a.incarnation = req.incarnation();
    a.acked_seq = 0;
    a.shards.clear();  // a new agent run tells what it holds in its first report
    a.reported = false;
  }
  BackLocked(req.machine(), now);
  LogLocked("machine " + req.machine() + " registered (incarnation " + std::to_string(req.incarnation()) + ")");
  return Status::OK();
}

void Plane::CheckMonitorsLocked(Time now) {
  if (!controller_ || done_step_ || !journal_error_.ok()) return;
  // Stalled since the last tick (an etcd election held the journal 2.3 s
  // under a loaded host): the first report read after it is older news
  // than the ones queued behind it, and a hang judged on it was this
  // process's stall (HaCluster's test evicted a healthy machine so). The
  // tick that notices the stall credits it and checks.
  if (last_tick_ && now - *last_tick_ > 4 * options_.tick_period) return;
  for (Event& e : monitors_->Check(now)) {
    // A slow machine whose device says why (NVML: thermal, power brake):
    // the reason goes with the verdict, into the incident.
    if (auto* slow = std::get_if<FailSlowSuspected>(&e)) {
      auto it = agents_.find(slow->machine);
      if (it != agents_.end() && !it->second.device_slowdown.empty()) {
        slow->detail += " (its device reports: " + it->second.device_slowdown + ")";
      }
    }
    FeedLocked(e, now, nullptr);
  }
}

int64_t Plane::OpenStream(const std::string& machine) {
  PlaneLock lock(this);
  const int64_t id = next_stream_++;
  Agent& a = AgentForLocked(machine);
  // The older stream ends: parked, it is told so now; else its turn's
  // holder finds it superseded at its next TakeCommand.
  if (a.parked) {
    CommandSink* old = a.parked->sink;
    a.parked.reset();
    deferred_.push_back([old] { old->Superseded(); });
  }
  a.stream = id;
  a.stream_closed = false;
  changed_.NotifyAll();  // wakes an older blocking stream so that it sees it is superseded
  return id;
}

std::optional<wire::Command> Plane::NextForStreamLocked(Agent& a, const std::string& machine,
                                                        std::string* sent_desired) {
  if (!a.oneshots.empty()) {
    wire::Command c = std::move(a.oneshots.front());
    a.oneshots.pop_front();
    return c;
  }
  if (!a.desired || a.desired->id() == *sent_desired || HeldLocked(*a.desired)) return std::nullopt;
  *sent_desired = a.desired->id();
  wire::Command c = *a.desired;
  // A restart decided before this controller's restart was replayed
  // without restore sources (nobody had reported holdings yet); the
  // holdings reported since name them.
  if (c.kind() == wire::Command::START_RANKS && c.restore_from_size() == 0 && !c.fresh_machines() && controller_ &&
      c.generation() == controller_->state().placement.generation) {
    const Routes& routes = CurrentRoutesLocked();
    auto mine = routes.slots_of.find(machine);
    for (size_t slot : mine == routes.slots_of.end() ? std::vector<size_t>{} : mine->second) {
      if (slot >= routes.plan.slots.size()) continue;
      for (const RestoreSource& s : routes.plan.slots[slot].restore_from) {
        wire::ShardSource* src = c.add_restore_from();
        src->set_rank(s.rank);
        src->set_machine(s.machine);
        src->set_addr(s.addr);
        src->set_step(s.step);
      }
    }
  }
  return c;
}

std::optional<wire::Command> Plane::NextCommand(const std::string& machine, int64_t stream,
                                                std::string* sent_desired, Time until,
                                                bool* superseded) {
  PlaneLock lock(this);
  *superseded = false;
  const auto deadline = std::chrono::system_clock::time_point(std::chrono::milliseconds(ToMs(until)));
  for (;;) {
    Agent& a = AgentForLocked(machine);
    if (a.stream != stream) {
      *superseded = true;
      return std::nullopt;
    }
    if (std::optional<wire::Command> c = NextForStreamLocked(a, machine, sent_desired)) return c;
    if (!changed_.WaitUntil(&mu_, deadline)) return std::nullopt;
  }
}

Plane::Turn Plane::TakeCommand(const std::string& machine, int64_t stream, std::string* sent_desired,
                               CommandSink* sink, wire::Command* out) {
  PlaneLock lock(this);
  // Gone: forgotten for another job's plane (Forget), whose stream is newer.
  auto it = agents_.find(machine);
  if (it == agents_.end()) return Turn::kSuperseded;
  Agent& a = it->second;
  if (a.stream != stream) return Turn::kSuperseded;
  if (a.stream_closed) return Turn::kClosed;
  if (std::optional<wire::Command> c = NextForStreamLocked(a, machine, sent_desired)) {
    *out = std::move(*c);
    return Turn::kWrite;
  }
  a.parked = Agent::Parked{stream, sink, sent_desired};
  return Turn::kParked;
}

bool Plane::CloseStream(const std::string& machine, int64_t stream) {
  PlaneLock lock(this);
  auto it = agents_.find(machine);
  if (it == agents_.end()) return false;
  Agent& a = it->second;
  if (a.stream == stream) a.stream_closed = true;
  if (!a.parked || a.parked->stream != stream) return false;
  a.parked.reset();
  return true;
}

void Plane::WakeStreamLocked(const std::string& machine, Agent& a) {
  if (!a.parked || a.parked->stream != a.stream || a.stream_closed) return;
  std::optional<wire::Command> c = NextForStreamLocked(a, machine, a.parked->sent_desired);
  if (!c) return;
  CommandSink* sink = a.parked->sink;
  a.parked.reset();
  deferred_.push_back([sink, c = std::move(*c)]() mutable { sink->Deliver(std::move(c)); });
}

void Plane::WakeStreamsLocked() {
  changed_.NotifyAll();
  for (auto& [id, a] : agents_) WakeStreamLocked(id, a);
}


std::optional<wire::RegisterRequest> Plane::Forget(const std::string& machine) {
  PlaneLock lock(this);
  auto it = agents_.find(machine);
  if (it == agents_.end()) return std::nullopt;
  const Agent& a = it->second;
  wire::RegisterRequest req;
  req.set_machine(machine);
  req.set_machine_dir(a.dir);
  req.set_incarnation(a.incarnation);
  req.set_shard_addr(a.shard_addr);
  req.set_domain(a.domain);
  req.set_ring_addr(a.ring_addr);
  // Its stream ends now: parked, it is told so; else its turn's holder
  // finds the machine gone at its next TakeCommand.
  if (a.parked) {
    CommandSink* old = a.parked->sink;
    deferred_.push_back([old] { old->Superseded(); });
  }
  agents_.erase(it);
  liveness_.Remove(machine);
  RoutesChangedLocked();
  changed_.NotifyAll();
  LogLocked("machine " + machine + " released to another job of the fleet");
  return req;
}

std::vector<MachineId> Plane::LiveMachines(Time now) {
  PlaneLock lock(this);
  now = NowLocked(now);
  AbsorbArrivalsLocked(now);
  const Duration lease = LeaseLocked(now);  // as Submit's
  std::vector<MachineId> out;
  for (const auto& [id, a] : agents_) {
    if (!LostLocked(id) && now - LastHeardLocked(id) <= lease) out.push_back(id);
  }
  return out;
}

std::vector<MachineId> Plane::Machines() {
  PlaneLock lock(this);
  std::vector<MachineId> out;
  for (const auto& [id, a] : agents_) out.push_back(id);
  return out;
}

bool Plane::HasJob() {
  PlaneLock lock(this);
  return controller_.has_value();
}

int Plane::WaitingFor() {
  PlaneLock lock(this);
  const bool waiting = controller_ && !done_step_ && controller_->state().job == JobState::kWaitingForMachines;
  return waiting ? last_wait_ : 0;
}

int Plane::MachinesNeeded() {
  PlaneLock lock(this);
  return launch_ && controller_ ? launch_->spec.MachinesNeeded() : 0;
}

bool Plane::InJob(const MachineId& machine) {
  PlaneLock lock(this);
  return controller_ && controller_->state().FindMachine(machine) != nullptr;
}

void Plane::Requeue(const std::string& machine, wire::Command command) {
  PlaneLock lock(this);
  Agent& a = AgentForLocked(machine);
  a.oneshots.push_front(std::move(command));
  changed_.NotifyAll();
  WakeStreamLocked(machine, a);
}

}  // namespace bulwark::plane
