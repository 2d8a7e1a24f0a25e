// Actions: what the policy tells the actuation layer (agents, cluster
// backend) to do.
//
// Every action carries an id derived from the state it was decided in, so the
// same decision made twice (a repeated reconcile, a duplicated event) yields
// the same id and the actuator treats the repeat as a no-op. Ids are never
// reused for a different decision: they embed the placement generation or
// the incident they belong to.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "controller/job.h"
#include "controller/machine.h"
#include "controller/time.h"

namespace bulwark::controller {

enum class ActionKind {
  kEvict,             // take `machine` out of service until an operator returns it
  kActivate,          // wake standby `machine` into the job
  kRestartAll,        // (re)start every rank on `placement`, from the newest checkpoint
  kWaitForMachines,   // hold the job: `count` machines missing, none on standby
  kStopJob,           // give up; `reason` says why and what a human should do
  kReplenishStandby,  // the standby pool is `count` machines short of its target
  kCaptureStacks,     // every machine of `placement` sends its ranks' stacks for `incident`
  kRunDiagnostics,    // every machine of `placement` stops its ranks and runs `tests` within `budget_ms`
  kRequeue,           // requeue mode: stop every rank of `placement`, give the machines back until `until`
  kStageRelease,      // every machine of `placement` sets up processes of `release` beside its ranks
  kCheckup,           // evicted `machine` runs `tests` off the job's path and answers (policy_checkup.cc)
  kAlignCheck,        // every machine of `placement` runs the alignment test beside its ranks (policy_align.cc)
};

const char* ActionKindName(ActionKind k);

struct Action {
  ActionKind kind = ActionKind::kEvict;
  std::string id;
  MachineId machine;            // kEvict, kActivate
  Placement placement;          // kRestartAll
  // kRestartAll, when Reconcile knows it: the slots whose machine differs
  // from the current placement (`slots_known`). Apply and the simulator then
  // touch those slots only instead of comparing all 12,500 of a 100k-GPU job
  // at every restart, which was most of a simulated year's run time.
  bool slots_known = false;
  std::vector<int> changed_slots;
  int64_t checkpoint_step = 0;  // kRestartAll: latest checkpoint reported (0: none); advisory
  // kRestartAll: the release the ranks run (releases.h); and whether the
  // machines come fresh (requeue mode): no in-memory copy survives on them,
  // so the ranks restore from durable storage.
  int release = 1;
  bool fresh = false;
  // kRestartAll after a drifting machine was found by the periodic check
  // (with `fresh`): restore at most `restore_at_most`, discarding every
  // newer copy, which may hold the drift (0: from the start).
  bool rollback = false;
  int64_t restore_at_most = 0;
  Time until{};  // kRequeue: when the machines are back
  int count = 0;                // kWaitForMachines, kReplenishStandby
  int64_t incident = 0;         // the incident it belongs to, 0 for none
  int64_t check = 0;            // kAlignCheck: the periodic bitwise check's number
  // kAlignCheck: the persisted steps agents keep for a rollback (the
  // newest at or below each).
  std::vector<int64_t> keep_steps;
  std::string reason;
  // kRunDiagnostics, kCheckup and kAlignCheck: the tests ("compute", "device", "alignment", or
  // "replay" with `groups`: each replay group's slots' machines, horizontal
  // groups first as "h<i>", then vertical as "v<j>", named in `group_names`).
  std::vector<std::string> tests;
  int64_t budget_ms = 0;
  std::vector<std::vector<MachineId>> groups;
  std::vector<std::string> group_names;

  // "restart_all restart-all/g3: ..." for logs and test failures.
  std::string ToString() const;
};

// Constructors; each builds the id from its arguments.
Action EvictAction(const MachineId& machine, int64_t incident, std::string reason);
Action ActivateAction(const MachineId& machine, int64_t generation);
Action RestartAllAction(Placement placement, int64_t checkpoint_step, std::string reason, int release = 1,
                        bool fresh = false);
Action RequeueAction(const Placement& placement, Time until, std::string reason);
Action StageReleaseAction(const Placement& placement, int release, std::string reason);
Action WaitForMachinesAction(int missing, int64_t generation);
Action StopJobAction(int64_t incident, std::string reason);
Action ReplenishStandbyAction(int deficit, int target, int64_t standby_arrivals);
Action CaptureStacksAction(int64_t incident, Placement placement, std::string reason);
// `rung` tells two rungs of one incident apart in the id.
Action RunDiagnosticsAction(int64_t incident, int rung, Placement placement, std::vector<std::string> tests,
                            Duration budget, std::string reason);
// One checkup per machine and incident: a repeated decision is one checkup.
Action CheckupAction(const MachineId& machine, int64_t incident, std::vector<std::string> tests, std::string reason);

// The periodic bitwise check number `check`, beside the ranks of `placement`.
Action AlignCheckAction(int64_t check, Placement placement, Duration budget, std::string reason);

// The actions of `kind` in `actions`, in order: for tests and the simulator.
std::vector<Action> OfKind(const std::vector<Action>& actions, ActionKind kind);

}  // namespace bulwark::controller
