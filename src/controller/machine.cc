#include "controller/machine.h"

namespace bulwark::controller {
namespace {

using S = MachineState;

// kAllowed[from][to], in enum order: Joining, Standby, Active, Diagnosing, Evicted.
// One table is the whole lifecycle; see the diagram in machine.h.
constexpr bool kAllowed[kNumMachineStates][kNumMachineStates] = {
    //            Join   Stby   Actv   Diag   Evct
    /* Join */ {false, true, false, false, true},
    /* Stby */ {false, false, true, true, true},
    /* Actv */ {false, true, false, true, true},
    /* Diag */ {false, true, true, false, true},
    /* Evct */ {true, false, false, false, false},
};

}  // namespace

const char* MachineStateName(MachineState s) {
  switch (s) {
    case S::kJoining: return "joining";
    case S::kStandby: return "standby";
    case S::kActive: return "active";
    case S::kDiagnosing: return "diagnosing";
    case S::kEvicted: return "evicted";
  }
  return "unknown";
}

Status CheckMachineTransition(MachineState from, MachineState to) {
  if (kAllowed[static_cast<int>(from)][static_cast<int>(to)]) return Status::OK();
  std::string msg = std::string("illegal machine transition ") + MachineStateName(from) + " -> " +
                    MachineStateName(to);
  if (from == S::kEvicted) {
    msg += " (an evicted machine returns only through OperatorReturned and a self-check)";
  }
  return Status::FailedPrecondition(msg);
}

Status MachineStatus::MoveTo(MachineState to, Time at, std::string reason) {
  Status st = CheckMachineTransition(state, to);
  if (!st.ok()) return st.Annotate("machine " + id);
  state = to;
  state_since = at;
  last_reason = std::move(reason);
  return Status::OK();
}

}  // namespace bulwark::controller
