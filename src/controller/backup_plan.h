// BackupPlan: where each slot's checkpoint shards are backed up, and where a
// restarted rank can fetch its shard back from. Pure: computed from the
// placement and the agents' last reports at every restart, never stored.
//
// Each rank keeps its newest shard in its own machine's memory (the primary)
// and its agent pushes a copy to the slot's backup peer. A fault that takes
// out a machine must not take out the copy too, so the peer lies outside the
// rank's eviction unit. The policy over-evicts whole parallel groups (a
// hang's or a slow machine's pipeline, ByteRobust §3), so the peer lies, if
// the layout allows, outside every PP and DP group of the slot's ranks
// (ByteRobust backs each rank up outside both); else outside its PP groups
// (the unit evicted most often); else on any other machine. A pure
// data-parallel job has one DP group of every rank and no PP groups: its
// peer is the next machine.
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
#include "controller/topology.h"

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

// True when a rank of slot `b` shares a `kind` group of more than one rank
// with a rank of slot `a`. `layout` must describe the placement's world;
// one that does not (a default Topology) has no groups.
bool SharesGroup(const Placement& placement, const Topology& layout, int a, int b, GroupKind kind);

// The slot whose machine backs up slot `slot`'s shards: the first slot in
// ring order after `slot` on another machine, outside `slot`'s PP and DP
// groups if any is, else outside its PP groups, else any; -1 when there is
// none (a one-machine job: its shards are protected only by durable storage).
int BackupSlotOf(const Placement& placement, const Topology& layout, int slot);

// The routes of every slot of `placement`. `shard_addrs` maps a machine to
// its agent's shard server; `holdings` is what the agents last reported
// holding. A rank's restore sources are the holders of its shard other than
// the rank's own machine, with a known address: newest step first; at equal
// steps backups before primaries (a primary off the rank's machine belongs
// to the machine the rank was moved away from, which is suspect), then in
// machine id order, so the plan is deterministic. A standby that just
// replaced a failed machine holds nothing, so its ranks restore from the
// failed machine's backup peer.
BackupPlan PlanBackups(const Placement& placement, const Topology& layout,
                       const std::map<MachineId, std::string>& shard_addrs, const std::vector<ShardHolding>& holdings);

}  // namespace bulwark::controller
