// Machines as the controller sees them: identity, lifecycle state, and what
// has been observed about each.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "controller/time.h"

namespace bulwark::controller {

using MachineId = std::string;

// The lifecycle of a machine in the fleet.
//
//   kJoining ──self-check passed──> kStandby ──activated──> kActive
//      │  self-check failed            │  ▲                    │
//      └──────────> kEvicted <─────────┘  └── released ────────┘
//                      │  (any fault on a standby, active or diagnosing machine)
//                      └──OperatorReturned──> kJoining
//
// kDiagnosing is entered from kStandby or kActive for stop-time checks and
// leaves to kActive, kStandby or kEvicted by their verdict.
// There is no terminal state: an evicted machine waits for an operator, and
// only OperatorReturned followed by a passed self-check brings it back, with
// two exceptions that did nothing wrong themselves: a machine lost with its
// switch (policy_domains.cc) and one over-evicted on suspicion that passes
// its checkup (policy_checkup.cc). A machine evicted for a fault of its own
// never comes back without an operator, so a flaky machine cannot oscillate
// in and out of the job.
enum class MachineState { kJoining, kStandby, kActive, kDiagnosing, kEvicted };
constexpr int kNumMachineStates = 5;

const char* MachineStateName(MachineState s);

// OK when `from -> to` is a legal step of the lifecycle above; otherwise
// FailedPrecondition naming both states. Staying in a state is not a step.
Status CheckMachineTransition(MachineState from, MachineState to);

// What the controller knows about one machine: its state (decided here) and
// the observations that rules look back on (observed by agents).
struct MachineStatus {
  MachineId id;
  MachineState state = MachineState::kJoining;
  Time state_since{};
  std::string last_reason;             // why it entered its current state
  std::vector<Time> network_alerts;    // recent NIC alerts, oldest first
  std::vector<Time> crashes;           // recent software crashes of its ranks
  // The placement slot it was given by the latest restart, -1 for none.
  // Kept by Apply so that finding the slots to fill needs no scan of a
  // 10,000-machine placement (the simulator reconciles after every event).
  int slot = -1;
  // Its failure domain: the rack or switch it hangs under ("r1"), as its
  // agent registered it (MachineJoined::domain); empty: none known.
  std::string domain;
  // Evicted because its domain went down, not for a fault of its own: it
  // comes back, without an operator, when it registers again with a passed
  // self-check (policy_domains.cc).
  bool lost_with_domain = false;
  // Over-evicted on suspicion (a hang's, a slow machine's or an anomaly's
  // group) and checked off the job's path: the incident whose checkup is in
  // flight, 0 for none. A passed checkup returns it to the pool
  // (policy_checkup.cc), a failed one leaves it to an operator.
  int64_t checkup = 0;

  // Moves to `to` through CheckMachineTransition; on refusal nothing changes
  // and the Status names the machine.
  Status MoveTo(MachineState to, Time at, std::string reason);
};

}  // namespace bulwark::controller
