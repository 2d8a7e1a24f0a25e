// How a fault reaches the simulated fleet: a machine's own fault (what it
// stalls, whom it pins), a top-of-rack switch taking its rack down and
// bringing it back, and the extra hazard of a machine new to the fleet.
// The rest of the fleet's clock and the controller's actions are in
// fleet_sim.cc.
#include "sim/fleet_sim.h"

#include "sim/fleet_model.h"

namespace bulwark::sim {
namespace fleet {
namespace {

// Faults that make their machine the culprit (evicting it is no
// over-eviction). A software crash or a flap that heals leaves it healthy.
bool PinsMachine(FaultClass c) { return c != FaultClass::kSoftware && c != FaultClass::kNicFlap; }
// Faults after which no step completes until a restart. Silent corruption
// stalls the job through its NaN (FleetSim::EmitNan), a step later.
bool Stalls(FaultClass c) {
  return c != FaultClass::kNicFlap && c != FaultClass::kFailSlow && c != FaultClass::kSdc;
}

}  // namespace

void FleetSim::Stall(int machine, FaultClass cls) {
  SyncProgress();
  stall_machine_ = machine;
  stall_class_ = cls;
  if (stalled_) return;
  FeedProgress(reported_);
  stalled_ = true;
  stall_since_ = running_ ? StepTime(reported_) : restart_at_;
  // No step comes any more: unless the fault's own events restart the job
  // first, the hang detector will say so once its allowance has passed.
  Schedule(std::max(now_, stall_since_ + monitors_.hang_allowance()) + Duration(1), Kind::kMonitor, gen_);
}
void FleetSim::Inject(const Fault& f) {
  const JobState js = ctl_->state().job;
  if (f.manual) {
    if (js != JobState::kRunning && js != JobState::kRestarting) return;
    ++r_.fleet.faults_by_class[kNumFaultClasses];
    ++r_.arms[0].faults;
    Deliver(ManualRestart{"code update", now_});
    return;
  }
  if (f.slot >= static_cast<int>(slots_.size())) return;
  const int m = slots_[f.slot];
  if (machines_[m].evicted) return;  // its slot waits for a machine: nothing runs there
  ++r_.fleet.faults_by_class[static_cast<int>(f.cls)];
  ++r_.arms[0].faults;
  if (PinsMachine(f.cls)) {
    machines_[m].broken = true;
    machines_[m].fault = f.cls;
  }
  if (Stalls(f.cls)) Stall(m, f.cls);
  const MachineId id = IdOf(m);
  const RankId rank = f.slot * c_.gpus_per_machine;
  const Costs& k = c_.costs;
  switch (f.cls) {
    case FaultClass::kGpu:
      ScheduleEvent(now_ + Secs(k.detect_gpu), RankExited{id, rank, 1, 0, "xid", now_ + Secs(k.detect_gpu)});
      break;
    case FaultClass::kHbm:
      ScheduleEvent(now_ + Secs(k.detect_hbm), RankExited{id, rank, 1, 0, "ecc", now_ + Secs(k.detect_hbm)});
      break;
    case FaultClass::kSoftware:
      ScheduleEvent(now_ + Secs(k.detect_software), RankExited{id, rank, 1, 0, "", now_ + Secs(k.detect_software)});
      break;
    case FaultClass::kNetwork:
      // A link that stays down alerts at every inspection until evicted.
      for (int i = 1; i <= c_.policy.network_alerts_to_evict; ++i) {
        const Time at = now_ + Secs(k.nic_alert_interval * i);
        ScheduleEvent(at, NetworkAlert{id, "link down", at});
      }
      break;
    case FaultClass::kNicFlap:
      ScheduleEvent(now_ + Secs(k.nic_alert_interval),
                    NetworkAlert{id, "link flapped", now_ + Secs(k.nic_alert_interval)});
      break;
    case FaultClass::kHost:
      // Its agent stops reporting; the core's liveness rule decides when it
      // is lost (CheckLiveness), as the plane's tick would.
      heartbeats_.Down(id, now_);
      WatchSilence();
      break;
    case FaultClass::kHang:
      break;  // only the hang detector sees it
    case FaultClass::kSdc:
      // Silent: no event of its own. The step in flight goes non-finite
      // everywhere; the anomaly detector sees no culprit (the real path:
      // reattempt, the same NaN again, the stop-time ladder).
      sdc_machines_.push_back(m);
      if (running_ && !stalled_) {
        SyncProgress();
        EmitNan(m, reported_ + 1);
      }
      break;
    case FaultClass::kFailSlow: {
      // Every step now waits for the slow machine; the fail-slow detector
      // reads its stage's compute times (sampled) until it flags it or the
      // sampling gives up.
      // The factor belongs to the fault, not to the run: drawn from the
      // fault's own time and slot, so that an elastic and a whole-world
      // run of one seed get the same slow machines, as they get the same
      // faults (the run's noise differs with its events).
      Rng own(c_.seed * 0x9e3779b97f4a7c15ULL ^
              static_cast<uint64_t>(std::llround(f.at * 1000.0)) * 0xbf58476d1ce4e5b9ULL ^
              static_cast<uint64_t>(f.slot));
      own.Next();
      const double factor = k.slow_factor_min + (k.slow_factor_max - k.slow_factor_min) * own.Uniform();
      FeedProgress(StepAt(now_));
      slow_ = Slow{m, factor, 0, {}};
      ++slow_chain_;  // an earlier slow machine's rounds end here
      const Topology t = Layout();
      const int dp = t.dp();
      const controller::Topology::Coord at = t.Of(f.slot * c_.gpus_per_machine);
      for (int i = 0; i < std::min(dp, 8); ++i) {
        const int peer = (at.dp + i) % dp;
        slow_.cohort.push_back((at.tp + t.tp * (peer + dp * at.pp)) / c_.gpus_per_machine);
      }
      Reanchor(k.step * factor);
      Schedule(now_ + c_.policy.slow_round, Kind::kSlowRound, 0, slow_chain_);
      break;
    }
  }
}

// A switch fault: every machine of the rack is cut off at once. Their
// agents' heartbeats stop together, their last reports up to a report
// period apart; the core's liveness rule (its domain skew) loses them in one
// tick, handed over as one decision (HandleAll, CheckLiveness); the job
// stalls if any of them was placed. The rack comes back after the repair
// time.
void FleetSim::SwitchDown(int rack) {
  if (rack < 0 || rack >= static_cast<int>(rack_members_.size())) return;
  ++r_.fleet.switch_faults;
  std::set<int> replicas;
  const int columns = std::max<int>(1, static_cast<int>(slots_.size()) / std::max(1, c_.pp));
  for (const int m : rack_members_[rack]) {
    if (machines_[m].down) continue;  // its switch is already down
    // Evicted for good, it left the rack (its place is a hole). Out for its
    // checkup, it is still in the rack and cut off with it: its checkup
    // cannot answer, and its heartbeat stops with the others'.
    if (machines_[m].evicted && machines_[m].checkup == 0) continue;
    machines_[m].down = true;
    ++r_.fleet.switch_machines_lost;
    if (machines_[m].evicted) ++r_.fleet.switch_checkups_cut;
    if (!machines_[m].evicted) {
      machines_[m].broken = true;  // evicting it, placed or standing by, is no over-eviction: it is unreachable
      machines_[m].fault = FaultClass::kHost;
    }
    if (Placed(m)) {
      ++r_.fleet.switch_placed_lost;
      replicas.insert(machines_[m].slot % columns);
      Stall(m, FaultClass::kHost);  // may deliver a step, and provision: no reference held across it
    }
    heartbeats_.Down(IdOf(m), now_);
  }
  r_.fleet.switch_replicas_hit += static_cast<int64_t>(replicas.size());
  WatchSilence();
  Schedule(now_ + Secs(c_.domains.switch_repair), Kind::kRackUp, 0, rack);
}

// The switch is repaired: each machine it cut off registers again with a
// passed self-check. The controller takes back those it evicted with the
// domain (policy_domains.cc); a flapping switch's stay out (no operator in
// the simulated fleet), and their places in the rack are free again.
void FleetSim::SwitchUp(int rack) {
  for (const int m : rack_members_[rack]) {
    if (!machines_[m].down) continue;
    const MachineId id = IdOf(m);
    heartbeats_.Up(id, DomainOf(m), now_);  // its agent reports again, whatever the controller makes of it
    // As on the plane (Plane::JoinIfNewLocked), an agent heard from again
    // registers only where the controller holds its machine lost with its
    // switch. One it evicted for good (lost alone, so a machine fault to it,
    // or a flapping switch's) is logged there and stays out, for an operator.
    if (const MachineStatus* st = ctl_->state().FindMachine(id);
        st != nullptr && st->state == MachineState::kEvicted && !st->lost_with_domain) {
      machines_[m].down = false;
      machines_[m].evicted = true;
      ++r_.fleet.switch_kept_out;
      holes_.push_back(rack);
      continue;
    }
    const MachineSim before = machines_[m];
    // Back in the fleet unless the controller says otherwise: it may place
    // it at once (a job waiting for machines), in this very Deliver.
    MachineSim& back = machines_[m];
    back.down = false;
    back.evicted = false;
    back.broken = false;
    if (!(back.slot >= 0 && back.slot < static_cast<int>(slots_.size()) && slots_[back.slot] == m)) back.slot = -1;
    MachineJoined j{id, true, "switch repaired", now_};
    j.domain = DomainOf(m);
    Deliver(j);  // may provision machines: machines_ may move
    const MachineStatus* st = ctl_->state().FindMachine(id);
    if (st != nullptr && st->state != MachineState::kEvicted) {
      ++r_.fleet.switch_returned;
      if (before.evicted) BackInService(machines_[m]);
      if (st->state == MachineState::kStandby) AnnounceSpares(m);
    } else if (st != nullptr && st->checkup != 0) {
      // Back, and checked before it serves (its Checkup is on its way): out
      // until it answers (CheckupDue), its place in the rack kept; a
      // machine over-evicted on suspicion stays out of service until then.
      ++r_.fleet.switch_returned;
      machines_[m].evicted = true;
      machines_[m].healthy_out = before.healthy_out;
      machines_[m].evicted_at = before.evicted_at;
      machines_[m].suspected = before.suspected;
    } else {
      MachineSim& out = machines_[m];
      out = before;
      out.down = false;
      out.evicted = true;
      ++r_.fleet.switch_kept_out;
      holes_.push_back(rack);
    }
  }
}

int FleetSim::Install(int machine) {
  const int per = c_.domains.rack_machines;
  int rack;
  if (holes_next_ < holes_.size()) {
    rack = holes_[holes_next_++];
  } else {
    rack = static_cast<int>(rack_members_.size());
    // A new rack fills up before another is opened.
    if (!rack_members_.empty() && static_cast<int>(rack_members_.back().size()) < per) --rack;
  }
  if (rack >= static_cast<int>(rack_members_.size())) rack_members_.emplace_back();
  rack_members_[rack].push_back(machine);
  machines_[machine].rack = rack;
  return rack;
}

void FleetSim::InfantHazard(int machine) {
  const Domains& d = c_.domains;
  if (!d.on() || d.infant_factor <= 1 || d.infant_days <= 0) return;
  double per_day = 0;
  for (int i = 0; i < kNumFaultClasses; ++i) {
    if (static_cast<FaultClass>(i) != FaultClass::kNicFlap) per_day += c_.rates.per_machine_day[i];
  }
  const double extra = (d.infant_factor - 1) * per_day / 86400.0;
  if (extra <= 0) return;
  // The machine's own draw: both arms of a seed give machine k the same
  // fate, whenever it arrives.
  Rng own(c_.seed * 0xd1b54a32d192ed03ULL ^ static_cast<uint64_t>(machine) * 0x9e3779b97f4a7c15ULL);
  own.Next();
  const double t = own.Exponential(extra);
  if (t < d.infant_days * 86400.0) Schedule(now_ + Secs(t), Kind::kInfant, 0, machine);
}

// The checkup of a machine over-evicted on suspicion, answered after the
// ladder's diagnose time. A machine with a fault fails it (its device or
// compute test), except one that corrupts silently: its compute and device
// tests pass, and the alignment test finds it with probability sdc_found,
// drawn for the machine and the incident, so both arms see the same.
// A healthy machine passes. Unreachable (its switch is down): no answer,
// it stays out.
void FleetSim::CheckupDue(int m) {
  MachineSim& ms = machines_[m];
  if (!ms.evicted || ms.down || ms.checkup == 0) return;
  const int64_t incident = ms.checkup;
  ms.checkup = 0;
  ++r_.fleet.checkups;
  const bool sdc = ms.broken && ms.fault == FaultClass::kSdc;
  Rng own(c_.seed * 0x2545f4914f6cdd1dULL ^ static_cast<uint64_t>(m) * 0x9e3779b97f4a7c15ULL ^
          static_cast<uint64_t>(incident));
  own.Next();
  const bool sdc_found = sdc && own.Uniform() < c_.costs.sdc_found;
  DiagnosticsReported r{incident, IdOf(m), {}, "", now_};
  for (const std::string& t : c_.policy.checkup_tests) {
    const bool pass = !ms.broken || (sdc && (t != "alignment" || !sdc_found));
    r.results.push_back({t, pass, pass ? "" : sdc ? "result differs from the reference" : "fault found", 0});
  }
  // Back in the fleet unless the controller keeps it out: it may place it
  // at once (a job waiting for machines), in this very Deliver. Its place
  // in the rack is taken back if no new machine has taken it meanwhile.
  const MachineSim before = ms;
  ms.evicted = false;
  ms.slot = -1;
  auto hole = std::find(holes_.begin() + static_cast<std::ptrdiff_t>(holes_next_), holes_.end(), ms.rack);
  const bool refilled = ms.rack >= 0 && hole != holes_.end();
  if (refilled) holes_.erase(hole);
  Deliver(std::move(r));  // may provision machines: machines_ may move
  const MachineStatus* st = ctl_->state().FindMachine(IdOf(m));
  MachineSim& after = machines_[m];
  if (st != nullptr && st->state != MachineState::kEvicted) {
    ++r_.fleet.checkup_returned;
    if (before.broken) ++r_.fleet.checkup_returned_broken;
    const double out = Seconds(now_ - before.evicted_at);
    r_.fleet.checkup_return_mean_s += out;  // a sum until CountOutOfService
    r_.fleet.checkup_return_max_s = std::max(r_.fleet.checkup_return_max_s, out);
    if (before.suspected) {  // over-evicted on suspicion, not a switch's
      ++r_.fleet.suspect_returned;
      r_.fleet.suspect_return_mean_s += out;
      r_.fleet.suspect_return_max_s = std::max(r_.fleet.suspect_return_max_s, out);
    }
    after.suspected = false;
    BackInService(after);
    if (st->state == MachineState::kStandby) AnnounceSpares(m);
    return;
  }
  after = before;
  after.checkup = 0;
  ++r_.fleet.checkup_kept;
  if (refilled) holes_.push_back(before.rack);
}

void FleetSim::BackInService(MachineSim& m) {
  if (m.healthy_out) r_.fleet.healthy_out_days += Seconds(now_ - m.evicted_at) / 86400.0;
  m.healthy_out = false;
}

// At the end: the healthy machines still out count to the end, and the
// machines in service are those the controller holds active or standing by.
void FleetSim::CountOutOfService() {
  FleetStats& f = r_.fleet;
  if (f.checkup_returned > 0) f.checkup_return_mean_s /= static_cast<double>(f.checkup_returned);
  if (f.suspect_returned > 0) f.suspect_return_mean_s /= static_cast<double>(f.suspect_returned);
  for (MachineSim& m : machines_) {
    if (m.evicted) BackInService(m);
  }
  const ClusterState& s = ctl_->state();
  f.in_service_end = s.CountIn(MachineState::kActive) + s.CountIn(MachineState::kStandby) +
                     s.CountIn(MachineState::kDiagnosing);
}

}  // namespace fleet
}  // namespace bulwark::sim
