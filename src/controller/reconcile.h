// Reconcile: compare the job's desired world (JobSpec) with the machines it
// actually has, and return the actions that close the gap.
//
// Level-triggered, in the Kubernetes sense: it reads only the state, not the
// event that led here, so it can run after every event, on a timer, or after
// a controller restart, and it returns the same actions for the same state.
// When the world already matches it returns nothing.
#pragma once

#include <vector>

#include "controller/action.h"
#include "controller/cluster_state.h"
#include "controller/policy_config.h"
#include "controller/standby_pool.h"
#include "controller/time.h"

namespace bulwark::controller {

// Pure: reads `state`, changes nothing. In order:
//  1. Slots of the placement without an active machine (all of them before
//     the first start): enough standbys -> Activate each, then RestartAll on
//     the new placement; too few -> WaitForMachines. A gang job cannot run
//     short, so standbys are taken all together or not at all.
//  2. Otherwise a pending reattempt -> RestartAll on the same machines.
//  3. The standby pool below its P99 target -> ReplenishStandby.
// A stopped job gets nothing: kStopped is terminal.
// Today's decisions depend on the state alone; `now` is part of the contract
// so that time-based ones (an activation that never reported back) need no
// change to callers.
std::vector<Action> Reconcile(const ClusterState& state, const PolicyConfig& config, Time now);

// The pool report for the current state: the target for the job's size,
// and the standbys left once the job's open slots are filled.
StandbyReport StandbyStatus(const ClusterState& state, const PolicyConfig& config);

}  // namespace bulwark::controller
