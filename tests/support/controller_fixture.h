// Helpers for the controller policy tests: a virtual clock in seconds, short
// event constructors, a job fixture, and a compact rendering of actions so
// that expectations read as the decision they specify.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "controller/controller.h"
#include "controller/signals.h"

namespace bulwark::controller::testing {

// Virtual time: S(90) is 90 s after the epoch; M(5) is 5 min.
inline Time S(double seconds) { return TimeFromMs(std::llround(seconds * 1000.0)); }
inline Duration Secs(double seconds) { return Duration(std::llround(seconds * 1000.0)); }
inline Time M(double minutes) { return S(minutes * 60.0); }

// One rank's step report, as an agent sends it.
inline RankSignal Sig(const MachineId& m, int rank, int64_t step, Time at, double step_ms = 100, double compute_ms = 80,
               double loss = 3.0, double grad_norm = 1.0) {
  RankSignal s;
  s.machine = m;
  s.rank = rank;
  s.step = step;
  s.loss = loss;
  s.grad_norm = grad_norm;
  s.local_grad_norm = grad_norm;
  s.step_ms = step_ms;
  s.compute_ms = compute_ms;
  s.observed = at;
  return s;
}

inline Event Crash(const MachineId& m, const std::string& signature, Time at, int rank = 0) {
  return RankExited{m, rank, 1, 0, signature, at};
}
inline Event DeviceFailed(const MachineId& m, Time at) {
  return InspectionFailed{m, InspectionKind::kDevice, "GPU fell off the bus", at};
}
inline Event HeartbeatLost(const MachineId& m, Time last, Time at) {
  return MachineHeartbeatLost{m, last, at};
}
inline Event Flap(const MachineId& m, Time at) { return NetworkAlert{m, "eth0 link down", at}; }
inline Event Joined(const MachineId& m, bool passed, Time at) {
  return MachineJoined{m, passed, passed ? "" : "EUD found a bad GPU", at};
}
inline Event Step(int64_t step, Time at) { return StepCompleted{step, at}; }
inline Event Checkpoint(int64_t step, Time at) { return CheckpointSaved{step, at}; }
inline Event Restored(int64_t step, const std::string& source, int64_t newest_step, double ms, Time at) {
  return CheckpointRestored{step, source, newest_step, ms, at};
}
inline Event Returned(const MachineId& m, Time at) { return OperatorReturned{m, at}; }

// "evict m02", "activate s01", "restart_all g2 m01,s01,m03,m04 ckpt 10",
// "wait 1", "stop", "replenish 1".
inline std::string Brief(const Action& a) {
  switch (a.kind) {
    case ActionKind::kEvict: return "evict " + a.machine;
    case ActionKind::kActivate: return "activate " + a.machine;
    case ActionKind::kRestartAll: {
      std::string s = "restart_all g" + std::to_string(a.placement.generation) + " ";
      for (size_t i = 0; i < a.placement.slots.size(); ++i) {
        s += (i ? "," : "") + a.placement.slots[i];
      }
      s += " ckpt " + std::to_string(a.checkpoint_step);
      if (a.release != 1) s += " r" + std::to_string(a.release);
      if (a.rollback) s += " rollback<=" + std::to_string(a.restore_at_most);
      return a.fresh ? s + " fresh" : s;
    }
    case ActionKind::kRequeue: return "requeue until " + FormatTime(a.until);
    case ActionKind::kStageRelease: return "stage r" + std::to_string(a.release);
    case ActionKind::kWaitForMachines: return "wait " + std::to_string(a.count);
    case ActionKind::kStopJob: return "stop";
    case ActionKind::kReplenishStandby: return "replenish " + std::to_string(a.count);
    case ActionKind::kCaptureStacks: return "trace i" + std::to_string(a.incident);
    case ActionKind::kCheckup: return "checkup " + a.machine + " i" + std::to_string(a.incident);
    case ActionKind::kAlignCheck: {
      std::string s = "align_check c" + std::to_string(a.check) + " ";
      for (size_t i = 0; i < a.placement.slots.size(); ++i) s += (i ? "," : "") + a.placement.slots[i];
      return s;
    }
    case ActionKind::kRunDiagnostics: {
      std::string s = "diagnose i" + std::to_string(a.incident);
      for (size_t i = 0; i < a.tests.size(); ++i) s += (i ? "," : " ") + a.tests[i];
      return s;
    }
  }
  return "?";
}

inline std::vector<std::string> Briefs(const std::vector<Action>& actions) {
  std::vector<std::string> out;
  for (const Action& a : actions) out.push_back(Brief(a));
  return out;
}

using Lines = std::vector<std::string>;

// A job of `machines` machines x 2 ranks, with a fleet of m01..mNN (they
// come first in id order, so they become the job) plus standbys s01..sKK.
class Job {
 public:
  explicit Job(int machines = 4, int standbys = 2, PolicyConfig config = {},
               JobSpec::Recovery recovery = JobSpec::Recovery::kStandby, Duration provisioning = Duration(0),
               int pp = 1) {
    JobSpec spec;
    spec.recovery = recovery;
    spec.pp = pp;
    spec.provisioning_delay = provisioning;
    spec.id = "llama";
    spec.ranks_per_machine = 2;
    spec.world_size = machines * 2;
    spec.command = "bulwark-train";
    std::vector<MachineId> fleet;
    // Wide fleets get 4-digit names so that id order is numeric order.
    const int width = machines >= 100 ? 4 : 2;
    for (int i = 1; i <= machines; ++i) fleet.push_back(Name("m", i, width));
    for (int i = 1; i <= standbys; ++i) fleet.push_back(Name("s", i, 2));
    Result<Controller> c = Controller::Create(spec, config, fleet, S(0));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    if (c.ok()) controller.emplace(std::move(*c));
  }

  static MachineId Name(const char* prefix, int i, int width) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "%s%0*d", prefix, width, i);
    return buf;
  }

  // Handles an event that must be accepted; returns the actions.
  std::vector<Action> Do(const Event& e, Time now) {
    Result<std::vector<Action>> r = controller->Handle(e, now);
    EXPECT_TRUE(r.ok()) << Describe(e) << ": " << r.status().ToString();
    return r.ok() ? *r : std::vector<Action>{};
  }
  // Same, at the event's own observation time.
  std::vector<Action> Do(const Event& e) { return Do(e, ObservedAt(e)); }

  std::vector<Action> Reconcile(Time now) {
    Result<std::vector<Action>> r = controller->Reconcile(now);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : std::vector<Action>{};
  }

  // Starts the job at t=0 and completes steps 1..last, one every 10 s, with
  // a checkpoint after each: step k completes at 10k s.
  void StartAndRun(int64_t last) {
    Reconcile(S(0));
    RunSteps(1, last, S(10));
  }
  // Completes steps first..last, the first at `first_at`, then every 10 s.
  void RunSteps(int64_t first, int64_t last, Time first_at) {
    for (int64_t k = first; k <= last; ++k) {
      Time at = first_at + Secs(10.0 * static_cast<double>(k - first));
      Do(Step(k, at));
      Do(Checkpoint(k, at));
    }
  }

  const ClusterState& state() const { return controller->state(); }
  MachineState StateOf(const MachineId& m) const { return state().FindMachine(m)->state; }
  const Incident& LastIncident() const { return controller->incidents().back(); }

  std::optional<Controller> controller;
};

}  // namespace bulwark::controller::testing
