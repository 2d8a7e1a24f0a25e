#include "sim/fleet_sim.h"

#include "sim/fleet_model.h"

namespace bulwark::sim {
namespace fleet {

SimConfig FleetSim::WithFittedAllowance(SimConfig c, SimResult& r) {
  const Duration fitted = Secs(2 * c.RestartSeconds());
  if (c.fit_first_step_allowance && c.policy.hang_first_step < fitted) {
    c.policy.hang_first_step = fitted;
    r.fleet.hang_first_step_raised = true;
  }
  r.fleet.hang_first_step = Seconds(c.policy.hang_first_step);
  return c;
}

std::string FleetSim::IdOf(int index) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "m%07d", index);
  return buf;
}

int FleetSim::NewMachine() {
  machines_.emplace_back();
  return static_cast<int>(machines_.size()) - 1;
}

void FleetSim::ScheduleEvent(Time at, Event e) {
  int64_t slot;
  if (!free_payloads_.empty()) {
    slot = free_payloads_.back();
    free_payloads_.pop_back();
    payloads_[slot] = std::move(e);
  } else {
    slot = static_cast<int64_t>(payloads_.size());
    payloads_.push_back(std::move(e));
  }
  Schedule(at, Kind::kDeliver, 0, slot);
}

void FleetSim::ScheduleEvents(Time at, std::vector<Event> events) {
  int64_t slot;
  if (!free_batches_.empty()) {
    slot = free_batches_.back();
    free_batches_.pop_back();
    batches_[slot] = std::move(events);
  } else {
    slot = static_cast<int64_t>(batches_.size());
    batches_.push_back(std::move(events));
  }
  Schedule(at, Kind::kDeliverAll, 0, slot);
}

void FleetSim::Reanchor(double step_s) {
  if (running_ && !stalled_) {
    const int64_t k = StepAt(now_);
    t_first_ = StepTime(k);
    s_first_ = k;
  }
  step_s_ = step_s;
}

// Reports the last step completed by now, if the controller has not heard
// of it: what the ranks' every-step reports would have told it by now.
void FleetSim::SyncProgress() {
  if (!running_ || stalled_) return;
  const int64_t k = StepAt(now_);
  if (k <= reported_) return;
  reported_ = k;
  high_water_ = std::max(high_water_, k);
  Deliver(StepCompleted{k, StepTime(k)});
}

// A replay injects its faults by step, as the demo does.
void FleetSim::ScheduleScript() {
  if (script_next_ >= c_.script.size() || !running_ || stalled_) return;
  Schedule(StepTime(c_.script[script_next_].at_step), Kind::kScript, gen_);
}

void FleetSim::Deliver(Event e) {
  if (!std::holds_alternative<StepCompleted>(e)) SyncProgress();
  ++r_.fleet.events;
  if (c_.record_events) r_.fleet.event_log.push_back(FormatTime(now_) + " " + Describe(e));
  Result<std::vector<Action>> acts = ctl_->Handle(e, now_);
  if (!acts.ok()) {
    if (r_.fleet.refused++ == 0) r_.fleet.first_refusal = Describe(e) + ": " + acts.status().message();
    return;
  }
  Carry(*acts);
}
void FleetSim::DeliverAll(std::vector<Event> events) {
  SyncProgress();
  r_.fleet.events += static_cast<int64_t>(events.size());
  if (c_.record_events) {
    for (const Event& e : events) r_.fleet.event_log.push_back(FormatTime(now_) + " " + Describe(e));
  }
  std::vector<std::pair<size_t, Status>> refused;
  // Not copied (clamping changes none of these: each is delivered at or
  // after its time).
  Result<std::vector<Action>> acts = ctl_->HandleAllInPlace(events, now_, &refused);
  for (const auto& [i, why] : refused) {
    if (r_.fleet.refused++ == 0) r_.fleet.first_refusal = Describe(events[i]) + ": " + why.message();
  }
  if (!acts.ok()) {
    if (r_.fleet.refused++ == 0) r_.fleet.first_refusal = "a batch of " + std::to_string(events.size()) + " events: " + acts.status().message();
    return;
  }
  Carry(*acts);
}

void FleetSim::Carry(const std::vector<Action>& actions) {
  FleetStats& s = r_.fleet;
  for (const Action& a : actions) {
    switch (a.kind) {
      case ActionKind::kEvict: {
        MachineSim& m = machines_[IndexOf(a.machine)];
        m.evicted = true;
        if (IndexOf(a.machine) == slow_.machine) slow_ = Slow{};  // the pace returns at the restart
        // Its ranks are gone: the job makes no progress until a restart.
        if (m.slot >= 0 && slots_[m.slot] == IndexOf(a.machine)) stalled_ = true;
        ++s.evicted;
        if (!m.broken) ++s.healthy_evicted;
        m.evicted_at = now_;
        m.healthy_out = !m.broken;
        const bool returned = std::find(c_.returned_classes.begin(), c_.returned_classes.end(), m.fault) !=
                              c_.returned_classes.end();
        if (m.broken && returned) Schedule(now_ + Secs(c_.return_after), Kind::kReturn, 0, IndexOf(a.machine));
        // It leaves the fleet, and its place in the rack is free; one its
        // switch took comes back with the switch (SwitchUp).
        if (m.rack >= 0 && !m.down) holes_.push_back(m.rack);
        break;
      }
      case ActionKind::kActivate:
      case ActionKind::kStageRelease:  // the simulated fleet runs no releases
      case ActionKind::kAlignCheck:    // nor the periodic bitwise check (it never sends AlignmentCheckDue)
        break;
      case ActionKind::kRestartAll:
        OnRestart(a);
        break;
      case ActionKind::kWaitForMachines:
        // The cluster backend is asked for the missing machines too, so a
        // fleet with no standby target still recovers, a provisioning later.
        ++s.waits;
        Provision(a.count);
        break;
      case ActionKind::kRequeue:
        // Every rank stops; the machines come back after the delay.
        stalled_ = true;
        ScheduleEvent(a.until, RequeueDue{a.until});
        break;
      case ActionKind::kStopJob:
        s.stopped = true;
        s.stop_reason = a.reason;
        break;
      case ActionKind::kReplenishStandby: {
        s.max_deficit = std::max(s.max_deficit, a.count);
        Provision(a.count);
        break;
      }
      case ActionKind::kCaptureStacks: {
        StacksAnalyzed v = AnalyzeHang();
        v.incident = a.incident;
        v.generation = a.placement.generation;
        v.observed = now_ + Secs(c_.costs.stack_capture);
        ScheduleEvent(v.observed, std::move(v));
        break;
      }
      case ActionKind::kRunDiagnostics:
        ReportDiagnostics(a);
        break;
      case ActionKind::kCheckup:
        // Checked in the decision that evicted it: over-evicted on suspicion
        // (a switch's machines are checked when they register again).
        if (machines_[IndexOf(a.machine)].evicted_at == now_ && !machines_[IndexOf(a.machine)].down) {
          machines_[IndexOf(a.machine)].suspected = true;
        }
        machines_[IndexOf(a.machine)].checkup = a.incident;
        Schedule(now_ + Secs(c_.costs.diagnose), Kind::kCheckup, 0, IndexOf(a.machine));
        WatchSilence();  // out for its checkup, a silent machine's silence counts again
        break;
    }
  }
  // The monitors follow the decisions, as in the plane: a restart arms
  // them (and its ranks say hello), a stop or a wait disarms them.
  monitors_.AfterActions(actions, now_, Layout());
  for (const Action& a : actions) {
    if (a.kind == ActionKind::kRestartAll && !placed_.empty()) {
      monitors_.Observe(RankPhase{placed_[0], 0, "start", Duration(0), now_, 0});
    }
  }
}
// Orders machines until `wanted` are on their way; each joins the pool
// after the provisioning delay.
void FleetSim::Provision(int wanted) {
  if (!c_.provisioning) return;
  const Duration delay = c_.oracle_standbys ? Duration(0) : Secs(c_.costs.provision);
  for (; in_flight_ < wanted; ++in_flight_) {
    ++r_.fleet.standbys_requested;
    Schedule(now_ + delay, Kind::kArrive, 0, NewMachine());
  }
}

// The ranks restart on `p`: after process start, communicator init (growing
// with the job), the restore and one step, the first step completes.
void FleetSim::OnRestart(const Action& a) {
  const Placement& p = a.placement;
  ++r_.fleet.restarts;
  gen_ = p.generation;
  // An elastic job's survivors keep their processes and state (the first
  // start has none to keep); a machine new to the placement takes a
  // replica's state from a live peer.
  const bool elastic_restart = c_.Elastic() && !placed_.empty();
  bool joined = false;
  if (a.slots_known && placed_.size() == p.slots.size()) {
    // Only the slots that changed hands are parsed: a restart of 12,500
    // machines replaces a few, and the action names them.
    for (const int i : a.changed_slots) {
      if (placed_[i] == p.slots[i]) continue;
      const int m = IndexOf(p.slots[i]);
      joined = joined || machines_[m].slot < 0;
      placed_[i] = p.slots[i];
      slots_[i] = m;
      machines_[m].slot = i;
    }
  } else {
    // A narrower or regrown placement (an elastic job; for pipelines laid
    // out stage by stage again, NarrowerPipelineSlots) may move machines
    // between slots and leave some out: every machine placed before gives
    // up its slot, then the new placement's machines take theirs.
    const std::vector<int> before = slots_;
    for (size_t i = 0; i < before.size(); ++i) {
      if (before[i] >= 0 && machines_[before[i]].slot == static_cast<int>(i)) machines_[before[i]].slot = -2;
    }
    placed_.assign(p.slots.begin(), p.slots.end());
    slots_.assign(p.slots.size(), -1);
    for (size_t i = 0; i < p.slots.size(); ++i) {
      const int m = IndexOf(p.slots[i]);
      joined = joined || machines_[m].slot == -1;  // -2: it held a slot before
      slots_[i] = m;
      machines_[m].slot = static_cast<int>(i);
    }
    // The healthy machines left out (the rest of a broken pipeline) are
    // back in the pool: their agents stop the ranks and set up spares of
    // the job, then say so (StandbyReady), as for any standby.
    for (const int m : before) {
      if (m < 0 || machines_[m].slot != -2) continue;
      machines_[m].slot = -1;
      if (ctl_->state().standbys.count(IdOf(m)) != 0) {
        ++r_.fleet.returned_to_pool;
        AnnounceSpares(m);
      }
    }
  }
  width_ = p.world_size() / (c_.tp * c_.pp);
  if (width_ < c_.dp()) ++r_.fleet.narrow_restarts;
  const Costs& k = c_.costs;
  // The hang detector arms its first-step allowance at every start
  // (Monitors::AfterActions); it is checked when that allowance ends.
  Schedule(now_ + c_.policy.hang_first_step + Duration(1), Kind::kMonitor, gen_);
  fed_ = 0;
  high_water_ = std::max(high_water_, reported_);
  const int64_t durable_steps = std::max<int64_t>(1, std::llround(k.durable_interval / k.step));
  restored_ = k.memory_checkpoints ? high_water_ : high_water_ / durable_steps * durable_steps;
  running_ = false;
  stalled_ = false;
  stall_machine_ = -1;
  restart_at_ = now_;
  const SimConfig::Price price = elastic_restart ? c_.ElasticRestart(static_cast<int>(p.slots.size()), joined)
                                                 : c_.WorldRestart(static_cast<int>(p.slots.size()));
  const double seconds = price.Total();
  r_.fleet.restart_seconds += seconds;
  if (elastic_restart) ++r_.fleet.regroups;
  Schedule(now_ + Secs(seconds), Kind::kFirstStep, gen_);
}

// A standby's agent sets up spares of the job, a process start, then says
// so (agent: STANDBY_READY); an elastic job grows onto it only then, so the
// joiner's start-up is off the training replicas' path.
void FleetSim::AnnounceSpares(int machine) {
  const Time ready = now_ + Secs(c_.costs.process_start);
  ScheduleEvent(ready, StandbyReady{IdOf(machine), true, "", ready});
}

Status FleetSim::Run() {
  const int n = c_.machines();
  JobSpec spec;
  spec.id = "sim";
  spec.world_size = c_.gpus;
  spec.ranks_per_machine = c_.gpus_per_machine;
  spec.command = "train";
  spec.tp = c_.tp;
  spec.pp = c_.pp;
  if (c_.Elastic()) spec.recovery = JobSpec::Recovery::kElastic;
  Result<int> target = BinomialQuantile(n, c_.policy.daily_failure_rate, c_.policy.standby_quantile);
  if (!target.ok()) return target.status();
  const int standbys = c_.initial_standbys >= 0 ? c_.initial_standbys : *target;
  std::vector<MachineId> ids;
  for (int i = 0; i < n + standbys; ++i) ids.push_back(IdOf(NewMachine()));
  // Racks: machine i sits in rack i / R, and its agent says so. Which
  // machine takes which slot is the controller's: aware, its first
  // placement packs each pipeline replica under as few switches as fit and
  // spreads the standbys (PolicyConfig::domain_aware_placement,
  // controller/domain_placement.h); blind, machines in id order, so that
  // slot i (stage i / C of replica i % C; ranks are stage-major) is in
  // rack i / R: one stage of R replicas a rack.
  std::map<MachineId, std::string> domains;
  PolicyConfig policy = c_.policy;
  if (c_.domains.on()) {
    const int per = c_.domains.rack_machines;
    const int racks = (n + standbys + per - 1) / per;
    rack_members_.assign(racks, {});
    for (int i = 0; i < n + standbys; ++i) {
      machines_[i].rack = i / per;
      rack_members_[i / per].push_back(i);
      domains[ids[i]] = DomainOf(i);
    }
    r_.fleet.racks = racks;
    policy.domain_aware_placement = c_.domains.aware;
  }
  Result<Controller> ctl = Controller::Create(spec, policy, ids, now_, domains);
  if (!ctl.ok()) return ctl.status().Annotate("sim");
  ctl_.emplace(std::move(*ctl));
  for (int i = 0; i < n + standbys; ++i) heartbeats_.Up(ids[i], DomainOf(i), now_);
  r_.fleet.machines = n;
  r_.fleet.initial_standbys = standbys;
  r_.fleet.standby_target = *target;
  end_ = AtSeconds(c_.days * 86400.0);

  Result<std::vector<Action>> start = ctl_->Reconcile(now_);
  if (!start.ok()) return start.status();
  Carry(*start);
  // One fault of the stream waits in the queue at a time: memory stays flat.
  std::optional<Fault> pending = stream_.Next();
  if (pending) Schedule(AtSeconds(pending->at), Kind::kFault);
  ScheduleSpike();
  while (!queue_.empty() && !ended_ && !r_.fleet.stopped) {
    const Due d = queue_.top();
    if (d.at > end_) break;
    queue_.pop();
    now_ = d.at;
    const bool current = d.gen == gen_;
    switch (d.kind) {
      case Kind::kFault:
        if (pending) {
          // The trace itself, whatever it hits: an elastic and a whole-world
          // run of one seed must draw the same faults.
          ++r_.fleet.trace_faults;
          if (pending->rack >= 0) {
            // A switch: the digest takes its rack (the placement decides
            // which of the job's machines are under it).
            const uint64_t parts[] = {static_cast<uint64_t>(std::llround(pending->at * 1000.0)), 0x5717c4ULL,
                                      static_cast<uint64_t>(pending->rack)};
            for (const uint64_t x : parts) r_.fleet.trace_digest = (r_.fleet.trace_digest ^ x) * 0x100000001b3ULL;
            SwitchDown(pending->rack);
          } else {
            const uint64_t parts[] = {static_cast<uint64_t>(std::llround(pending->at * 1000.0)),
                                      static_cast<uint64_t>(pending->cls), static_cast<uint64_t>(pending->slot),
                                      pending->manual ? 1u : 0u};
            for (const uint64_t x : parts) r_.fleet.trace_digest = (r_.fleet.trace_digest ^ x) * 0x100000001b3ULL;
            Inject(*pending);
          }
        }
        pending = stream_.Next();
        if (pending) Schedule(AtSeconds(pending->at), Kind::kFault);
        break;
      case Kind::kDeliver: {
        Event e = std::move(payloads_[d.arg]);
        free_payloads_.push_back(d.arg);
        Deliver(std::move(e));
        break;
      }
      case Kind::kDeliverAll: {
        std::vector<Event> events = std::move(batches_[d.arg]);
        free_batches_.push_back(d.arg);
        DeliverAll(std::move(events));
        break;
      }
      case Kind::kFirstStep: {
        if (!current || stalled_ || running_) break;
        // A machine that corrupts silently, or the job's own bug, spoils the
        // first step: nothing completes.
        const int sdc = SdcPlaced();
        const bool bug = c_.bug_step == restored_ + 1;
        // The restore is reported before any step (the ranks report it first).
        Deliver(CheckpointRestored{restored_, c_.costs.memory_checkpoints ? "memory" : "durable", high_water_,
                                   1000.0 * (c_.costs.memory_checkpoints ? c_.costs.restore_memory
                                                                          : c_.costs.restore_durable),
                                   now_});
        if (d.gen != gen_ || stalled_) break;
        running_ = true;
        t_first_ = now_;
        s_first_ = sdc >= 0 || bug ? restored_ : restored_ + 1;
        reported_ = restored_;
        fed_ = restored_;
        // The pace: a slow machine still placed holds every step back, and
        // an elastic job below full width takes more micro-batches a rank.
        step_s_ = c_.costs.step * (Placed(slow_.machine) ? slow_.factor : 1.0) * c_.ElasticStepFactor(width_);
        if (sdc >= 0) {
          EmitNan(sdc, restored_ + 1);
          break;
        }
        if (bug) {
          Schedule(now_ + Secs(step_s_ / 2), Kind::kBug, gen_);
          break;
        }
        reported_ = s_first_;
        high_water_ = std::max(high_water_, s_first_);
        Deliver(StepCompleted{s_first_, now_});
        FeedProgress(s_first_);
        // A slow machine still being sampled: its rounds go on from here.
        if (slow_.machine >= 0 && slow_.machine_sampled) {
          Schedule(now_ + c_.policy.slow_round, Kind::kSlowRound, 0, ++slow_chain_);
        }
        if (s_first_ < high_water_) Schedule(StepTime(high_water_), Kind::kCatchUp, gen_);
        if (c_.total_steps > 0) Schedule(StepTime(std::max(c_.total_steps, s_first_)), Kind::kEnd, gen_);
        // The job's own bug strikes when it runs that step, on every start.
        if (c_.bug_step >= s_first_) {
          Schedule(std::max(now_, StepTime(c_.bug_step - 1) + Secs(c_.costs.step / 2)), Kind::kBug, gen_);
        }
        // The spike's batch comes round again.
        if (spike_step_ > s_first_) Schedule(StepTime(spike_step_ - 1), Kind::kSpike, gen_, 1);
        ScheduleScript();
        break;
      }
      case Kind::kCatchUp:
        if (current) SyncProgress();
        break;
      case Kind::kMonitor:
        if (current) CheckMonitors();
        break;
      case Kind::kSlowRound:
        if (slow_.machine < 0 || d.arg != slow_chain_) break;
        // A job that does not run reports nothing: the rounds resume at
        // the next generation's first step (kFirstStep).
        if (!running_ || stalled_) break;
        CheckMonitors();
        // Sampled for a bounded time: a machine the detector has not
        // flagged by then stays, slow, and the report counts it.
        if (++slow_.rounds >= 10 * c_.policy.slow_rounds * std::max(1, c_.policy.slow_min_steps)) {
          ++r_.fleet.slow_undetected;
          slow_.cohort.clear();  // still slow; no longer sampled
          slow_.machine_sampled = false;
          break;
        }
        Schedule(now_ + c_.policy.slow_round, Kind::kSlowRound, 0, slow_chain_);
        break;
      case Kind::kBug: {
        if (!current || !running_ || stalled_ || c_.bug_slot >= static_cast<int>(slots_.size()) ||
            StepAt(now_) + 1 != c_.bug_step) {
          break;
        }
        const int m = slots_[c_.bug_slot];
        Stall(m, FaultClass::kSoftware);
        const Time seen = now_ + Secs(c_.costs.detect_software);
        ScheduleEvent(seen, RankExited{IdOf(m), c_.bug_slot * c_.gpus_per_machine, 1, 0, "", seen});
        break;
      }
      case Kind::kSpike:
        if (d.arg == 1) {  // a replay of the spike's step
          if (current && running_ && !stalled_ && StepAt(now_) + 1 == spike_step_) EmitSpike();
          break;
        }
        if (running_ && !stalled_) {
          spike_step_ = StepAt(now_) + 1;
          spike_scale_ = c_.rates.spike_median * std::exp(c_.rates.spike_sigma * 2.0 *
                                                          (noise_.Uniform() + noise_.Uniform() + noise_.Uniform() - 1.5));
          ++r_.fleet.benign_spikes;
          EmitSpike();
        }
        ScheduleSpike();
        break;
      case Kind::kArrive: {
        --in_flight_;
        ++r_.fleet.standbys_arrived;
        const int m = static_cast<int>(d.arg);
        MachineJoined j{IdOf(m), true, "provisioned", now_};
        if (c_.domains.on()) {
          Install(m);
          j.domain = DomainOf(m);
        }
        heartbeats_.Up(j.machine, j.domain, now_);
        Deliver(j);
        AnnounceSpares(m);
        InfantHazard(m);
        break;
      }
      case Kind::kRackUp:
        SwitchUp(static_cast<int>(d.arg));
        break;
      case Kind::kCheckup:
        CheckupDue(static_cast<int>(d.arg));
        break;
      case Kind::kLiveness:
        CheckLiveness();
        break;
      case Kind::kInfant: {
        // A new machine's early failure: a GPU fault if it is placed; a
        // standby's agent finds the device gone (an inspection).
        MachineSim& ms = machines_[d.arg];
        if (ms.evicted || ms.down) break;
        ++r_.fleet.infant_faults;
        const int m = static_cast<int>(d.arg);
        if (Placed(m)) {
          Inject(Fault{Seconds(now_.time_since_epoch()), FaultClass::kGpu, false, ms.slot});
        } else {
          ms.broken = true;
          ms.fault = FaultClass::kGpu;
          Deliver(InspectionFailed{IdOf(m), InspectionKind::kDevice, "infant failure: GPU lost", now_});
        }
        break;
      }
      case Kind::kReturn: {
        MachineSim& m = machines_[d.arg];
        m = MachineSim{false, false, FaultClass::kGpu, m.slot};  // repaired; its slot may be refilled by it
        heartbeats_.Up(IdOf(static_cast<int>(d.arg)), DomainOf(static_cast<int>(d.arg)), now_);
        Deliver(OperatorReturned{IdOf(static_cast<int>(d.arg)), now_});
        Deliver(MachineJoined{IdOf(static_cast<int>(d.arg)), true, "repaired", now_});
        AnnounceSpares(static_cast<int>(d.arg));
        InfantHazard(static_cast<int>(d.arg));
        break;
      }
      case Kind::kScript: {
        if (!current || !running_ || stalled_ || script_next_ >= c_.script.size()) break;
        // Every fault due by this step, in script order, at the same time.
        const int64_t step = StepAt(now_);
        while (script_next_ < c_.script.size() && c_.script[script_next_].at_step <= step) {
          const ScriptedFault& s = c_.script[script_next_++];
          Inject(Fault{Seconds(now_.time_since_epoch()), s.cls, false, s.slot});
        }
        ScheduleScript();
        break;
      }
      case Kind::kEnd:
        if (current && running_ && !stalled_) {
          end_ = now_;
          ended_ = true;
        }
        break;
    }
  }
  if (!r_.fleet.stopped) now_ = std::max(now_, end_);
  Finish();
  return Status::OK();
}

}  // namespace fleet

Status RunBulwark(const SimConfig& config, SimResult& result) {
  BULWARK_RETURN_IF_ERROR(Validate(config));
  if (result.arms.empty()) result.arms.resize(1);
  result.arms[0] = ArmResult{};
  result.arms[0].name = config.Elastic() ? "bulwark elastic" : "bulwark whole-world";
  result.fleet = FleetStats{};
  const auto t0 = std::chrono::steady_clock::now();
  fleet::FleetSim sim(config, result);
  Status st = sim.Run();
  result.cpu_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

}  // namespace bulwark::sim
