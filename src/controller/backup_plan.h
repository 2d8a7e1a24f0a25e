// BackupPlan: where each slot's checkpoint shards are backed up, and where a
// restarted rank can fetch its shard back from. Pure: computed from the
// placement and the agents' last reports at every restart, never stored.
//
// Each rank keeps its newest shard in its own machine's memory (the primary)
// and its agent pushes a copy to the slot's backup peer. A fault that takes
// out a machine must not take out the copy too, so the peer lies outside the
// rank's eviction unit. With data-parallel ranks only the unit is the
// machine; SameEvictionUnit is the one place that says so.
//
// Re-homing needs no bookkeeping: the peer is a function of the placement,
// and a standby that replaces an evicted machine takes over its slot, so it
// takes over its place in the ring too. The slot before it gets the standby
// as its new peer, and the standby gets the evicted machine's old peer.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "controller/job.h"
#include "controller/machine.h"

namespace bulwark::controller {

// A copy of a rank's shard that a machine's agent reported holding.
struct ShardHolding {
  MachineId machine;
  RankId rank = 0;
  int64_t step = 0;     // the newest complete step of the copy
  bool backup = false;  // a peer's copy; false: the rank's own machine wrote it
};

// Where a restarting rank can fetch its shard from, other than its own
// machine's memory (which the agent knows without being told).
struct RestoreSource {
  RankId rank = 0;
  MachineId machine;
  std::string addr;  // the holder's shard server
  int64_t step = 0;
  bool backup = false;
};

struct SlotRoute {
  MachineId machine;
  MachineId backup_machine;  // empty: no peer outside the slot's eviction unit
  std::string backup_addr;   // empty when the peer has not told its address
  // For the slot's ranks, rank by rank in ascending order; within a rank
  // newest step first (see PlanBackups).
  std::vector<RestoreSource> restore_from;
  // The ranks whose backup peer this slot is, in local-rank order (empty for
  // a one-slot job): a replicated-state job writes their backups here from
  // its own memory.
  std::vector<RankId> backup_of;
};

struct BackupPlan {
  std::vector<SlotRoute> slots;  // one per placement slot, same order
};

// True when a fault that takes out slot `a`'s machine may take out slot
// `b`'s too. Data-parallel ranks only: the machine is the eviction unit. A
// later multi-machine unit (a tensor-parallel group, a rack) changes this
// function and nothing else.
bool SameEvictionUnit(const Placement& placement, int a, int b);

// The slot whose machine backs up slot `slot`'s shards: the next slot in
// ring order outside `slot`'s eviction unit, or -1 when there is none (a
// one-machine job: its shards are protected only by durable storage).
int BackupSlotOf(const Placement& placement, int slot);

// The routes of every slot of `placement`. `shard_addrs` maps a machine to
// its agent's shard server; `holdings` is what the agents last reported
// holding. A rank's restore sources are the holders of its shard other than
// the rank's own machine, with a known address: newest step first; at equal
// steps backups before primaries (a primary off the rank's machine belongs
// to the machine the rank was moved away from, which is suspect), then in
// machine id order, so the plan is deterministic. A standby that just
// replaced a failed machine holds nothing, so its ranks restore from the
// failed machine's backup peer.
BackupPlan PlanBackups(const Placement& placement, const std::map<MachineId, std::string>& shard_addrs,
                       const std::vector<ShardHolding>& holdings);

}  // namespace bulwark::controller
