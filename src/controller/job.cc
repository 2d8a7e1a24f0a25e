#include "controller/job.h"

namespace bulwark::controller {
namespace {

using J = JobState;

// kAllowed[from][to], in enum order: Pending, Restarting, Running, Waiting, Stopped.
constexpr bool kAllowed[kNumJobStates][kNumJobStates] = {
    //            Pend   Rstr   Run    Wait   Stop
    /* Pend */ {false, true, false, true, true},
    /* Rstr */ {false, true, true, true, true},
    /* Run  */ {false, true, false, true, true},
    /* Wait */ {false, true, false, false, true},
    /* Stop */ {false, false, false, false, false},
};

}  // namespace

Status JobSpec::Validate() const {
  if (world_size <= 0) return Status::InvalidArgument("job " + id + ": world_size must be positive");
  if (ranks_per_machine <= 0) {
    return Status::InvalidArgument("job " + id + ": ranks_per_machine must be positive");
  }
  if (world_size % ranks_per_machine != 0) {
    return Status::InvalidArgument("job " + id + ": world_size " + std::to_string(world_size) +
                                   " is not a multiple of ranks_per_machine " +
                                   std::to_string(ranks_per_machine));
  }
  if (provisioning_delay < Duration(0)) {
    return Status::InvalidArgument("job " + id + ": provisioning_delay must not be negative");
  }
  if (Status st = topology().Validate(); !st.ok()) return Status::InvalidArgument("job " + id + ": " + st.message());
  if (elastic() && pp == 1 && ranks_per_machine % tp != 0) {
    return Status::InvalidArgument("job " + id + ": recovery elastic needs replicas that fit in a machine (pp 1, "
                                   "tp dividing ranks_per_machine); use recovery standby for this layout");
  }
  // Pipelines across machines: a machine holds ranks of one stage only, and
  // whole tensor-parallel groups (tp 1, or tp dividing ranks_per_machine:
  // TP 8 on 8-GPU machines is one stage's TP group a machine), so a lost
  // machine breaks exactly the pipelines whose ranks it held.
  if (elastic() && pp > 1 && (ranks_per_machine % tp != 0 || (world_size / pp) % ranks_per_machine != 0)) {
    return Status::InvalidArgument("job " + id + ": recovery elastic with pp " + std::to_string(pp) +
                                   " needs tp dividing ranks_per_machine and machines that each hold ranks of one "
                                   "stage (world_size / pp a multiple of ranks_per_machine); use recovery standby "
                                   "for this layout");
  }
  return Status::OK();
}

const char* RecoveryName(JobSpec::Recovery r) {
  switch (r) {
    case JobSpec::Recovery::kStandby: return "standby";
    case JobSpec::Recovery::kRequeue: return "requeue";
    case JobSpec::Recovery::kElastic: return "elastic";
  }
  return "standby";
}

Result<JobSpec::Recovery> ParseRecovery(const std::string& name) {
  for (auto r : {JobSpec::Recovery::kStandby, JobSpec::Recovery::kRequeue, JobSpec::Recovery::kElastic}) {
    if (name == RecoveryName(r)) return r;
  }
  return Status::InvalidArgument("recovery '" + name + "' is not one of: standby, requeue, elastic");
}

int Placement::SlotOf(const MachineId& machine) const {
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i] == machine) return static_cast<int>(i);
  }
  return -1;
}

const char* JobStateName(JobState s) {
  switch (s) {
    case J::kPending: return "pending";
    case J::kRestarting: return "restarting";
    case J::kRunning: return "running";
    case J::kWaitingForMachines: return "waiting for machines";
    case J::kStopped: return "stopped";
  }
  return "unknown";
}

Status CheckJobTransition(JobState from, JobState to) {
  if (kAllowed[static_cast<int>(from)][static_cast<int>(to)]) return Status::OK();
  return Status::FailedPrecondition(std::string("illegal job transition ") + JobStateName(from) +
                                    " -> " + JobStateName(to));
}

}  // namespace bulwark::controller
