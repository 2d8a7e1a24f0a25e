#include "controller/action.h"

namespace bulwark::controller {

const char* ActionKindName(ActionKind k) {
  switch (k) {
    case ActionKind::kEvict: return "evict";
    case ActionKind::kActivate: return "activate";
    case ActionKind::kRestartAll: return "restart_all";
    case ActionKind::kWaitForMachines: return "wait_for_machines";
    case ActionKind::kStopJob: return "stop_job";
    case ActionKind::kReplenishStandby: return "replenish_standby";
    case ActionKind::kCaptureStacks: return "capture_stacks";
    case ActionKind::kRunDiagnostics: return "run_diagnostics";
    case ActionKind::kRequeue: return "requeue";
    case ActionKind::kStageRelease: return "stage_release";
    case ActionKind::kCheckup: return "checkup";
    case ActionKind::kAlignCheck: return "align_check";
  }
  return "unknown";
}

std::string Action::ToString() const {
  std::string s = std::string(ActionKindName(kind)) + " " + id;
  if (!reason.empty()) s += ": " + reason;
  return s;
}

Action EvictAction(const MachineId& machine, int64_t incident, std::string reason) {
  Action a;
  a.kind = ActionKind::kEvict;
  // Keyed by machine and incident: evicting the same machine for the same
  // episode twice is one eviction.
  a.id = "evict/" + machine + "/i" + std::to_string(incident);
  a.machine = machine;
  a.incident = incident;
  a.reason = std::move(reason);
  return a;
}

Action ActivateAction(const MachineId& machine, int64_t generation) {
  Action a;
  a.kind = ActionKind::kActivate;
  a.id = "activate/" + machine + "/g" + std::to_string(generation);
  a.machine = machine;
  return a;
}

Action RestartAllAction(Placement placement, int64_t checkpoint_step, std::string reason, int release,
                        bool fresh) {
  Action a;
  a.kind = ActionKind::kRestartAll;
  // One restart per placement generation: a repeat of the same restart is a
  // no-op, and a reattempt in place still gets a new id (a new generation).
  a.id = "restart-all/g" + std::to_string(placement.generation);
  a.placement = std::move(placement);
  a.checkpoint_step = checkpoint_step;
  a.reason = std::move(reason);
  a.release = release;
  a.fresh = fresh;
  return a;
}

Action StageReleaseAction(const Placement& placement, int release, std::string reason) {
  Action a;
  a.kind = ActionKind::kStageRelease;
  // One staging per release and placement: a restart before it is used
  // (a fault) changes the generation, and the new one stages again.
  a.id = "stage/r" + std::to_string(release) + "/g" + std::to_string(placement.generation);
  a.placement = placement;
  a.release = release;
  a.reason = std::move(reason);
  return a;
}

Action CheckupAction(const MachineId& machine, int64_t incident, std::vector<std::string> tests, std::string reason) {
  Action a;
  a.kind = ActionKind::kCheckup;
  a.id = "checkup/" + machine + "/i" + std::to_string(incident);
  a.machine = machine;
  a.incident = incident;
  a.tests = std::move(tests);
  a.reason = std::move(reason);
  return a;
}

Action RequeueAction(const Placement& placement, Time until, std::string reason) {
  Action a;
  a.kind = ActionKind::kRequeue;
  // One requeue per generation: the restart that ends it bumps the generation.
  a.id = "requeue/g" + std::to_string(placement.generation);
  a.placement = placement;
  a.until = until;
  a.reason = std::move(reason);
  return a;
}

Action WaitForMachinesAction(int missing, int64_t generation) {
  Action a;
  a.kind = ActionKind::kWaitForMachines;
  a.id = "wait/g" + std::to_string(generation) + "/missing" + std::to_string(missing);
  a.count = missing;
  a.reason = "waiting for " + std::to_string(missing) +
             " machine(s): the standby pool is empty; the job resumes when one joins";
  return a;
}

Action StopJobAction(int64_t incident, std::string reason) {
  Action a;
  a.kind = ActionKind::kStopJob;
  a.id = "stop/i" + std::to_string(incident);
  a.incident = incident;
  a.reason = std::move(reason);
  return a;
}

Action ReplenishStandbyAction(int deficit, int target, int64_t standby_arrivals) {
  Action a;
  a.kind = ActionKind::kReplenishStandby;
  // Between arrivals the shortfall can only grow, so (arrivals, shortfall)
  // names one situation: the same shortfall reported again is the same
  // request, and a pool that refilled and drained again makes a new one.
  a.id = "replenish/a" + std::to_string(standby_arrivals) + "/short" + std::to_string(deficit);
  a.count = deficit;
  a.reason = "standby pool is " + std::to_string(deficit) + " short of its target " +
             std::to_string(target);
  return a;
}

Action AlignCheckAction(int64_t check, Placement placement, Duration budget, std::string reason) {
  Action a;
  a.kind = ActionKind::kAlignCheck;
  a.id = "align-check/c" + std::to_string(check);
  a.check = check;
  a.placement = std::move(placement);
  a.tests = {"alignment"};
  a.budget_ms = ToMs(budget);
  a.reason = std::move(reason);
  return a;
}

std::vector<Action> OfKind(const std::vector<Action>& actions, ActionKind kind) {
  std::vector<Action> out;
  for (const Action& a : actions) {
    if (a.kind == kind) out.push_back(a);
  }
  return out;
}

Action CaptureStacksAction(int64_t incident, Placement placement, std::string reason) {
  Action a;
  a.kind = ActionKind::kCaptureStacks;
  // One trace per incident and generation: a repeat of the suspicion is no new trace.
  a.id = "trace/i" + std::to_string(incident) + "/g" + std::to_string(placement.generation);
  a.placement = std::move(placement);
  a.incident = incident;
  a.reason = std::move(reason);
  return a;
}

Action RunDiagnosticsAction(int64_t incident, int rung, Placement placement, std::vector<std::string> tests,
                            Duration budget, std::string reason) {
  Action a;
  a.kind = ActionKind::kRunDiagnostics;
  a.id = "diagnose/i" + std::to_string(incident) + "/r" + std::to_string(rung);
  a.incident = incident;
  a.placement = std::move(placement);
  a.tests = std::move(tests);
  a.budget_ms = ToMs(budget);
  a.reason = std::move(reason);
  return a;
}

}  // namespace bulwark::controller
