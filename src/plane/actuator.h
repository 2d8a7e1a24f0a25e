// Actuator: turns the policy's Actions into commands for agents. Pure: it
// decides which machine must be told what; the plane delivers.
//
// Commands are desired state (START_RANKS of generation g, or STOP_RANKS),
// and their ids come from the action ids, so a decision actuated twice (a
// replay after a controller restart, a resent command after a reconnect) is
// a no-op on the agent.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "bulwark.pb.h"
#include "controller/action.h"
#include "controller/backup_plan.h"
#include "controller/launch.h"
#include "plane/core.h"

namespace bulwark::plane {

struct MachineCommand {
  MachineId machine;
  wire::Command command;
};

// The commands that carry out `action` for the job `launch`. Activate and
// ReplenishStandby need none here: an activated standby gets its ranks with
// the RestartAll that follows, and the local backend has no machines to buy.
// `routes` is PlanBackups for a RestartAll's placement: each START_RANKS
// carries its slot's backup peer and restore sources. Other actions ignore
// it, and a plan that does not match the placement slot for slot (an empty
// one) leaves the routes out: the ranks then restore from their own memory
// or durable storage and back up nowhere until the next restart.
std::vector<MachineCommand> Actuate(const Action& action, const JobLaunch& launch,
                                    const Placement& current, const BackupPlan& routes);

// A standby's desired state while `launch` runs on `placement`: idle (a
// STOP_RANKS), with the job's command, environment and world so that its
// agent keeps a spare process of the job ready (agent/handoff.h). An agent
// that does not use it is idle, as with any STOP_RANKS. One id per job, so
// that an agent re-applies it after any other command.
wire::Command WarmStandby(const JobLaunch& launch, const Placement& placement, double spike_factor);

// An elastic job's START_RANKS get each rank's ring plan (RankLaunch
// ring_plan): its generation, cut by the auto layout, and the fixed ring
// addresses of the ranks it links to, from `ring_addrs` (each machine's
// RegisterRequest.ring_addr: local rank i listens at its port + i). With a
// machine of the placement that offers none, no rank gets a plan and the
// generation rendezvous through the store as before.
void AddRingPlans(std::vector<MachineCommand>& commands, const JobLaunch& launch, const Placement& placement,
                  const std::map<MachineId, std::string>& ring_addrs);

// The port rank 0 listens on for `generation`: a fresh one per generation, so
// a restart never waits for the previous run's socket to leave TIME_WAIT.
int MasterPort(const JobLaunch& launch, int64_t generation);

}  // namespace bulwark::plane
