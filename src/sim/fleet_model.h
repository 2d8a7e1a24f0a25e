// The fleet model's class, shared by fleet_sim.cc (the event loop, the
// faults and the controller's actions) and fleet_signals.cc (what the
// agents would send: step reports, stacks, diagnostics). Internal to
// src/sim; RunBulwark (fleet_sim.h) is the interface.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <queue>
#include <set>

#include "controller/controller.h"
#include "controller/monitors.h"
#include "controller/topology.h"
#include "sim/fault_stream.h"
#include "sim/fleet_sim.h"
#include "sim/heartbeats.h"
#include "sim/signals.h"

namespace bulwark::sim::fleet {

using namespace controller;  // the simulator speaks the controller's vocabulary

inline Time AtSeconds(double s) { return TimeFromMs(static_cast<int64_t>(std::llround(s * 1000.0))); }
inline Duration Secs(double s) { return Duration(static_cast<int64_t>(std::llround(s * 1000.0))); }
inline double Seconds(Duration d) { return static_cast<double>(d.count()) / 1000.0; }

class FleetSim {
 public:
  FleetSim(const SimConfig& c, SimResult& r)
      : c_(WithFittedAllowance(c, r)), r_(r), stream_(c), heartbeats_(HeartbeatOptions(c)), monitors_(c_.policy),
        noise_(c.seed * 0x9e3779b97f4a7c15ULL + 7), step_s_(c.costs.step) {}
  Status Run();

 private:
  // ---------------------------------------------------------------- the queue
  enum class Kind { kFault, kDeliver, kDeliverAll, kFirstStep, kCatchUp, kMonitor, kSlowRound, kSpike, kBug, kArrive, kReturn, kScript, kEnd, kRackUp, kInfant, kCheckup, kLiveness };
  struct Due {
    Time at;
    int64_t seq;
    Kind kind;
    int64_t gen = 0;   // the placement generation it belongs to (0: any)
    int64_t arg = 0;   // payload slot, machine index or stall id
  };
  struct Later {
    bool operator()(const Due& a, const Due& b) const { return a.at != b.at ? a.at > b.at : a.seq > b.seq; }
  };
  void Schedule(Time at, Kind kind, int64_t gen = 0, int64_t arg = 0) {
    queue_.push(Due{std::max(at, now_), seq_++, kind, gen, arg});
  }
  void ScheduleEvent(Time at, Event e);
  // Events that arrive together (every machine's diagnostics answer): one
  // decision of the controller (Controller::HandleAll), as the plane's tick
  // after them would take them.
  void ScheduleEvents(Time at, std::vector<Event> events);

  // ---------------------------------------------------------------- the fleet
  struct MachineSim {
    bool broken = false;
    bool evicted = false;
    FaultClass fault = FaultClass::kGpu;
    int slot = -1;  // the slot the latest restart gave it
    int rack = -1;      // its switch (SimConfig::domains), -1: no racks
    bool down = false;  // its switch is down: unreachable until the repair
    int64_t checkup = 0;    // the incident whose checkup it is running (0: none)
    bool suspected = false;  // over-evicted on suspicion (checked at once), until back
    Time evicted_at{};
    bool healthy_out = false;  // evicted with no fault of its own, not back yet
  };
  int NewMachine();
  static std::string IdOf(int index);
  static int IndexOf(const MachineId& id) { return std::atoi(id.c_str() + 1); }

  // ---------------------------------------------------------------- the job
  // Steps run at step_s_ from the anchor (t_first_, s_first_): the first
  // step of a generation, or the moment a slow machine changed the pace.
  int64_t StepAt(Time t) const {
    return s_first_ + static_cast<int64_t>(Seconds(t - t_first_) / step_s_);
  }
  Time StepTime(int64_t k) const { return t_first_ + Secs(step_s_ * static_cast<double>(k - s_first_)); }
  void Reanchor(double step_s);
  void SyncProgress();
  void Stall(int machine, FaultClass cls);
  void Inject(const Fault& f);
  // A machine that joined as a standby says it holds spares of the job.
  void AnnounceSpares(int machine);
  void ScheduleScript();
  // Failure domains (SimConfig::domains, issue 38). A switch fault takes
  // every machine of its rack down for the repair time; their heartbeats
  // stop together. SwitchUp: the machines register again.
  void SwitchDown(int rack);
  void SwitchUp(int rack);
  // Installs a machine new to the fleet in a rack: where an evicted one
  // left a hole, else in a new rack. Returns the rack.
  int Install(int machine);
  std::string DomainOf(int machine) const {
    return machines_[machine].rack < 0 ? std::string() : "r" + std::to_string(machines_[machine].rack);
  }
  // Liveness (sim/heartbeats.h): the core's rule decides when a silent
  // machine is lost. WatchSilence schedules the next tick's check while a
  // silent machine may yet be lost; CheckLiveness runs it and delivers the
  // losses as the plane's tick does (alone one by one, a domain's as one).
  static Heartbeats::Options HeartbeatOptions(const SimConfig& c);
  void WatchSilence();
  void CheckLiveness();
  // A machine new to the fleet may fail early (infant mortality).
  void InfantHazard(int machine);
  // Checkups of over-evicted machines (policy_checkup.cc): the answer after
  // the ladder's diagnose time; BackInService counts a machine's time out.
  void CheckupDue(int machine);
  void BackInService(MachineSim& m);
  void CountOutOfService();

  // ---------------------------------------------------------------- the signals (signals.h)
  // The ranks' step reports of steps fed_+1..upto, thinned: a run of steps
  // as one report, then the last ones one by one (what the detectors keep).
  void FeedProgress(int64_t upto);
  void Report(int64_t step, int steps, double loss_scale);
  // The monitors' verdicts by now, handed to the controller.
  void CheckMonitors();
  // A silently corrupting machine turns step `k` non-finite: every rank's
  // global values, none of its local ones, and the ranks hold the step.
  void EmitNan(int machine, int64_t k);
  void ScheduleSpike();
  void EmitSpike();
  controller::StacksAnalyzed AnalyzeHang() const;
  void ReportDiagnostics(const Action& a);
  bool Placed(int m) const { return m >= 0 && !machines_[m].evicted && machines_[m].slot >= 0 &&
                                    machines_[m].slot < static_cast<int>(slots_.size()) &&
                                    slots_[machines_[m].slot] == m; }
  int SdcPlaced() const;
  // The layout of the placement the job runs on now (an elastic job's
  // narrower placement has fewer replicas); the full job's before a start.
  Topology Layout() const {
    const int world = slots_.empty() ? c_.gpus : static_cast<int>(slots_.size()) * c_.gpus_per_machine;
    return Topology{world, c_.tp, c_.pp};
  }
  // The jitter of one reported value (`what`) of `step` on `slot`: a pure
  // function of the seed, the step, the slot and the value, so that two
  // runs of one seed (elastic and whole-world) report the same values for
  // the same step of the same slot, and the detectors see the same
  // signals, not the same signals shifted by the runs' other events.
  double NoiseAt(int64_t step, int slot, int what) const {
    uint64_t x = c_.seed * 0x9e3779b97f4a7c15ULL ^ static_cast<uint64_t>(step) * 0xbf58476d1ce4e5b9ULL ^
                 ((static_cast<uint64_t>(slot) << 8) | static_cast<uint64_t>(what)) * 0x94d049bb133111ebULL;
    double sum = 0;
    for (int i = 0; i < 3; ++i) {
      x += 0x9e3779b97f4a7c15ULL;
      uint64_t z = x;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      z ^= z >> 31;
      sum += static_cast<double>(z >> 11) * 0x1.0p-53;
    }
    return 1.0 + c_.costs.step_jitter * (sum - 1.5) * 2.0;
  }

  // ---------------------------------------------------------------- the controller
  void Deliver(Event e);
  void DeliverAll(std::vector<Event> events);
  void Carry(const std::vector<Action>& actions);
  void Provision(int wanted);
  void OnRestart(const Action& a);
  void Finish();

  static SimConfig WithFittedAllowance(SimConfig c, SimResult& r);

  const SimConfig c_;
  SimResult& r_;
  FaultStream stream_;
  Heartbeats heartbeats_;
  bool liveness_armed_ = false;  // a kLiveness check is queued
  std::optional<Controller> ctl_;
  std::priority_queue<Due, std::vector<Due>, Later> queue_;
  std::vector<Event> payloads_;  // events waiting in the queue; slots reused
  std::vector<int64_t> free_payloads_;
  std::vector<std::vector<Event>> batches_;  // ScheduleEvents' waiting batches; slots reused
  std::vector<int64_t> free_batches_;
  int64_t seq_ = 0;
  Time now_{};
  Time end_{};
  bool ended_ = false;

  std::vector<MachineSim> machines_;
  std::vector<int> slots_;  // slot -> machine index, from the latest RestartAll
  std::vector<MachineId> placed_;  // the same, as the controller names them
  int in_flight_ = 0;       // standbys requested and not yet arrived

  Monitors monitors_;       // the policy's own detectors, as the plane runs them
  Rng noise_;               // step-time noise, slow factors, spikes: apart from the fault trace
  int64_t fed_ = 0;         // the last step the monitors heard of in this generation
  double step_s_;           // seconds per step now (a slow machine stretches it)
  int width_ = 0;           // data-parallel replicas of the current placement
  // A machine that computes `factor` times its peers' time, while its
  // stage's step reports are sampled for the fail-slow detector.
  struct Slow {
    int machine = -1;
    double factor = 1;
    int rounds = 0;
    std::vector<int> cohort;  // slots reported each step: the slow one and peers of its stage
    bool machine_sampled = true;  // false once the sampling gave up
  } slow_;
  int64_t slow_chain_ = 0;  // the sampling rounds of the latest slow machine; older chains stop
  // A benign loss spike at `step` of size `scale`: it comes back whenever
  // that step (its batch) is replayed after a restart.
  int64_t spike_step_ = 0;
  double spike_scale_ = 1;

  int64_t gen_ = 0;
  bool running_ = false;    // the generation completed its first step
  bool stalled_ = false;    // a fault stopped progress; no step until a restart
  Time stall_since_{};
  int stall_machine_ = -1;
  std::vector<int> sdc_machines_;  // machines that corrupt silently, until evicted
  std::vector<std::vector<int>> rack_members_;  // rack -> the machines ever installed in it
  std::vector<int> holes_;  // racks where an evicted machine left room, oldest first
  size_t holes_next_ = 0;
  FaultClass stall_class_ = FaultClass::kGpu;
  Time restart_at_{};
  Time t_first_{};
  int64_t s_first_ = 1;
  int64_t reported_ = 0;    // the last step reported in this generation
  int64_t high_water_ = 0;
  int64_t restored_ = 0;
  size_t script_next_ = 0;
};

}  // namespace bulwark::sim::fleet
