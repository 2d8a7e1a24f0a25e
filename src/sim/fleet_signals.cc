// What the simulated agents send (signals.h): the ranks' step reports to
// the monitors, a corrupted step, benign spikes, stacks for the analyzer and
// the ladder's diagnostics. FleetSim's methods, beside fleet_sim.cc.
#include "sim/fleet_model.h"

namespace bulwark::sim::fleet {

void FleetSim::Report(int64_t step, int steps, double loss_scale) {
  const Costs& k = c_.costs;
  std::vector<int> slots = {0};
  slots.insert(slots.end(), slow_.cohort.begin(), slow_.cohort.end());
  for (const int slot : slots) {
    if (slot >= static_cast<int>(placed_.size())) continue;  // a cohort slot a narrower placement dropped
    RankSignal r;
    r.machine = placed_[slot];
    r.rank = slot * c_.gpus_per_machine;
    r.step = step;
    r.steps = steps;
    const double noise = steps == 1 ? NoiseAt(step, slot, 0) : 1.0;
    r.step_ms = 1000.0 * step_s_ * steps * noise;
    const double own = slots_[slot] == slow_.machine ? slow_.factor : 1.0;
    r.compute_ms = 1000.0 * k.step * k.compute_share * own * steps * (steps == 1 ? NoiseAt(step, slot, 1) : 1.0);
    r.comm_ms = r.step_ms - r.compute_ms;
    r.loss = 2.0 * loss_scale * (steps == 1 ? NoiseAt(step, slot, 2) : 1.0);
    r.grad_norm = 1.0 * (steps == 1 ? NoiseAt(step, slot, 3) : 1.0);
    r.local_grad_norm = r.grad_norm;
    r.observed = StepTime(step);
    monitors_.Observe(r);
  }
}

void FleetSim::FeedProgress(int64_t upto) {
  if (!running_ || upto <= fed_) return;
  const int64_t keep = c_.policy.hang_window + c_.policy.hang_warmup_steps;
  int64_t from = std::max(fed_ + 1, s_first_);
  if (upto - from + 1 > keep) {
    const int64_t bulk_end = upto - keep;
    Report(bulk_end, static_cast<int>(bulk_end - from + 1), 1.0);
    from = bulk_end + 1;
  }
  for (int64_t k = from; k <= upto; ++k) Report(k, 1, 1.0);
  fed_ = upto;
}

void FleetSim::CheckMonitors() {
  FeedProgress(running_ && !stalled_ ? StepAt(now_) : reported_);
  std::vector<Event> verdicts = monitors_.Check(now_);
  const bool silent = verdicts.empty();
  const int64_t gen = gen_;
  for (Event& e : verdicts) Deliver(std::move(e));
  // A stalled job the hang detector does not call hung yet: its allowance
  // is learned from the steps, and may have grown since the check was
  // scheduled (a slow machine's steps). Look again when it has passed,
  // at most every 30 s, until the stall ends or the generation changes.
  if (silent && stalled_ && gen == gen_ && monitors_.armed()) {
    Schedule(std::max(stall_since_ + monitors_.hang_allowance(), now_ + Secs(30)) + Duration(1), Kind::kMonitor, gen_);
  }
}

int FleetSim::SdcPlaced() const {
  for (int m : sdc_machines_) {
    if (Placed(m) && machines_[m].broken && machines_[m].fault == FaultClass::kSdc) return m;
  }
  return -1;
}

void FleetSim::EmitNan(int machine, int64_t k) {
  Stall(machine, FaultClass::kSdc);
  const Time at = std::max(now_, StepTime(k));
  // A sample of the ranks' reports: the detector waits anomaly_wait for the
  // rest of the 100,000, as it would for reports that do not come.
  for (int i = 0; i < 8 && i < static_cast<int>(placed_.size()); ++i) {
    const int slot = i == 0 ? machines_[machine].slot : (machines_[machine].slot + i) % static_cast<int>(placed_.size());
    RankSignal r;
    r.machine = placed_[slot];
    r.rank = slot * c_.gpus_per_machine;
    r.step = k;
    r.loss = r.grad_norm = std::nan("");
    // Silent corruption: every rank's own values look fine. The demo's
    // injected NaN shows in the culprit's own gradients.
    const bool own = i == 0 && c_.costs.sdc_shows_locally;
    r.local_grad_norm = own ? std::nan("") : 1.0;
    r.local_nonfinite = own;
    r.nonfinite = true;
    r.halted = "nan";
    r.observed = at;
    monitors_.Observe(r);
  }
  Schedule(at + c_.policy.anomaly_wait + Duration(1), Kind::kMonitor, gen_);
}

void FleetSim::ScheduleSpike() {
  if (c_.rates.benign_spikes_per_day <= 0 || !c_.script.empty()) return;
  Schedule(now_ + Secs(noise_.Exponential(c_.rates.benign_spikes_per_day / 86400.0)), Kind::kSpike);
}

// A benign spike at the step in flight, or the same spike again when its
// batch is replayed: the ranks report a loss spike_scale_ times the usual.
void FleetSim::EmitSpike() {
  if (!running_ || stalled_) return;
  SyncProgress();
  FeedProgress(reported_);
  Report(reported_ + 1, 1, spike_scale_);
  fed_ = reported_ + 1;
  // The report is of the step in flight: it arrives when that step ends.
  Schedule(std::max(now_, StepTime(reported_ + 1)) + c_.policy.anomaly_wait + Duration(1), Kind::kMonitor, gen_);
}

// The analyzer's verdict on the stacks a hang leaves: the stuck machine's
// ranks spin in a kernel, its pipeline neighbours wait in recv, everyone
// else in the all-reduce; a dead machine sends none. A link that is down
// leaves its ranks waiting in the all-reduce like everyone: no outlier.
controller::StacksAnalyzed FleetSim::AnalyzeHang() const {
  const Placement& p = ctl_->state().placement;
  const Topology t = Layout();
  const bool stuck = stall_machine_ >= 0 && Placed(stall_machine_) && stall_class_ == FaultClass::kHang;
  const int stuck_slot = stuck ? machines_[stall_machine_].slot : (stall_machine_ >= 0 && Placed(stall_machine_)
                                                                       ? machines_[stall_machine_].slot : 0);
  const int stuck_dp = t.Of(stuck_slot * c_.gpus_per_machine).dp;
  return AnalyzeSample(t, p, stuck_slot, c_.costs.stack_sample_replicas, [&](int slot) {
    const int m = slots_[slot];
    if (machines_[m].broken && machines_[m].fault == FaultClass::kHost) return RankRole::kNoStack;
    if (stuck && m == stall_machine_) return RankRole::kStuck;
    if (stuck && t.Of(slot * c_.gpus_per_machine).dp == stuck_dp) return RankRole::kRecvWait;
    return RankRole::kAllReduceWait;
  });
}

// The stop-time ladder's diagnostics, answered after their modelled time: a
// machine that corrupts silently disagrees with the others' alignment hash
// (with probability sdc_found), and a replay group holding it goes
// non-finite; every other machine and group passes.
void FleetSim::ReportDiagnostics(const Action& a) {
  const Costs& k = c_.costs;
  auto corrupts = [&](const MachineId& id) {
    const int m = IndexOf(id);
    return machines_[m].broken && machines_[m].fault == FaultClass::kSdc && !machines_[m].evicted;
  };
  if (a.tests == std::vector<std::string>{"replay"}) {
    const Time at = now_ + Secs(k.replay);
    DiagnosticsReported r{a.incident, a.placement.slots.empty() ? "" : a.placement.slots[0], {}, "", at};
    for (size_t g = 0; g < a.group_names.size(); ++g) {
      bool bad = false;
      if (g < a.groups.size()) {
        for (const MachineId& id : a.groups[g]) bad = bad || corrupts(id);
      }
      r.results.push_back({"replay/" + a.group_names[g], !bad, bad ? "non-finite loss" : "", 0});
    }
    ScheduleEvent(at, std::move(r));
    return;
  }
  // Every machine answers after the same modelled time: one batch, one
  // decision (Controller::HandleAll), not 12,500 (they were most of a
  // simulated year's events and time).
  const Time at = now_ + Secs(k.diagnose);
  const bool align = std::find(a.tests.begin(), a.tests.end(), "alignment") != a.tests.end();
  // Every machine's results are the same passes: built once, copied (grown
  // test by test for each of 12,500 machines, they were a twentieth of a
  // year's time).
  std::vector<DiagnosticResult> passed;
  for (const std::string& t : a.tests) {
    if (t != "alignment") passed.push_back({t, true, "", 0});
  }
  std::vector<Event> answers;
  answers.reserve(a.placement.slots.size());
  for (const MachineId& id : a.placement.slots) {
    DiagnosticsReported r{a.incident, id, passed, "", at};
    if (align) r.alignment_hash = corrupts(id) && noise_.Uniform() < k.sdc_found ? "corrupt" : "good";
    answers.push_back(std::move(r));
  }
  ScheduleEvents(at, std::move(answers));
}

}  // namespace bulwark::sim::fleet
