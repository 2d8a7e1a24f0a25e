// Backup placement and restore sources for in-memory checkpoints, as
// specifications: which machine backs up which, how evictions and standbys
// re-home backups, and where a restarted rank fetches its shard from.
#include <gtest/gtest.h>

#include <algorithm>

#include "controller/backup_plan.h"
#include "support/controller_fixture.h"

namespace bulwark::controller {
namespace {

using testing::Job;
using testing::S;

Placement Slots(std::vector<MachineId> machines, int ranks_per_machine = 2) {
  Placement p;
  p.generation = 1;
  p.ranks_per_machine = ranks_per_machine;
  p.slots = std::move(machines);
  return p;
}

// Every machine's shard server, at a recognizable address.
std::map<MachineId, std::string> Addrs(const std::vector<MachineId>& machines) {
  std::map<MachineId, std::string> out;
  for (const MachineId& m : machines) out[m] = m + ":7000";
  return out;
}

// "m01->m02" per slot.
std::vector<std::string> Ring(const BackupPlan& plan) {
  std::vector<std::string> out;
  for (const SlotRoute& r : plan.slots) out.push_back(r.machine + "->" + (r.backup_machine.empty() ? "none" : r.backup_machine));
  return out;
}

// "m02@40b" for each source of `rank` (b: backup, p: primary), in order.
std::vector<std::string> Sources(const BackupPlan& plan, RankId rank) {
  std::vector<std::string> out;
  for (const SlotRoute& r : plan.slots) {
    for (const RestoreSource& s : r.restore_from) {
      if (s.rank == rank) out.push_back(s.machine + "@" + std::to_string(s.step) + (s.backup ? "b" : "p"));
    }
  }
  return out;
}

// What the agents of a healthy ring report after step `step`: each machine
// holds its own ranks' primaries and its ring predecessor's backups.
std::vector<ShardHolding> SteadyHoldings(const Placement& p, int64_t step) {
  std::vector<ShardHolding> out;
  const int n = static_cast<int>(p.slots.size());
  for (int slot = 0; slot < n; ++slot) {
    for (int local = 0; local < p.ranks_per_machine; ++local) {
      const RankId rank = slot * p.ranks_per_machine + local;
      out.push_back({p.slots[slot], rank, step, false});
      if (int peer = BackupSlotOf(p, Topology{}, slot); peer >= 0) out.push_back({p.slots[peer], rank, step, true});
    }
  }
  return out;
}

TEST(BackupPlan, OneMachineJobHasNoPeer) {
  const Placement p = Slots({"m01"});
  const BackupPlan plan = PlanBackups(p, Topology{}, Addrs({"m01"}), SteadyHoldings(p, 5));
  EXPECT_EQ(Ring(plan), (std::vector<std::string>{"m01->none"}));
  EXPECT_TRUE(plan.slots[0].backup_addr.empty());
  EXPECT_TRUE(plan.slots[0].restore_from.empty());  // only its own memory, or durable storage
}

TEST(BackupPlan, TwoMachinesBackUpEachOther) {
  const Placement p = Slots({"m01", "m02"});
  const BackupPlan plan = PlanBackups(p, Topology{}, Addrs({"m01", "m02"}), {});
  EXPECT_EQ(Ring(plan), (std::vector<std::string>{"m01->m02", "m02->m01"}));
  EXPECT_EQ(plan.slots[0].backup_addr, "m02:7000");
  EXPECT_EQ(plan.slots[1].backup_addr, "m01:7000");
}

TEST(BackupPlan, PeersFollowTheSlotRing) {
  const Placement p = Slots({"m01", "m02", "m03", "m04"});
  const BackupPlan plan = PlanBackups(p, Topology{}, Addrs(p.slots), {});
  EXPECT_EQ(Ring(plan), (std::vector<std::string>{"m01->m02", "m02->m03", "m03->m04", "m04->m01"}));
}

TEST(BackupPlan, PeerIsNeverTheSlotsOwnMachine) {
  // A machine listed in two slots is one eviction unit: its slots skip each
  // other in the ring.
  const Placement p = Slots({"m01", "m01", "m02"});
  EXPECT_EQ(Ring(PlanBackups(p, Topology{}, Addrs({"m01", "m02"}), {})),
            (std::vector<std::string>{"m01->m02", "m01->m02", "m02->m01"}));
  EXPECT_EQ(Ring(PlanBackups(Slots({"m01", "m01"}), Topology{}, Addrs({"m01"}), {})),
            (std::vector<std::string>{"m01->none", "m01->none"}));
}

TEST(BackupPlan, EachSlotHoldsTheBackupsOfTheSlotBeforeIt) {
  const Placement p = Slots({"m01", "m02", "m03"});
  const BackupPlan plan = PlanBackups(p, Topology{}, Addrs(p.slots), {});
  EXPECT_EQ(plan.slots[0].backup_of, (std::vector<RankId>{4, 5}));  // m03's ranks, local rank order
  EXPECT_EQ(plan.slots[1].backup_of, (std::vector<RankId>{0, 1}));
  EXPECT_EQ(plan.slots[2].backup_of, (std::vector<RankId>{2, 3}));
  EXPECT_TRUE(PlanBackups(Slots({"m01"}), Topology{}, Addrs({"m01"}), {}).slots[0].backup_of.empty());
  // m02 would hold both m01 slots' backups: not one-to-one, so none is
  // written locally and every backup goes over the network.
  for (const SlotRoute& r : PlanBackups(Slots({"m01", "m01", "m02"}), Topology{}, Addrs({"m01", "m02"}), {}).slots) {
    EXPECT_TRUE(r.backup_of.empty()) << r.machine;
  }
}

TEST(BackupPlan, PeerWithoutAnAddressIsNamedButHasNoRoute) {
  const Placement p = Slots({"m01", "m02"});
  const BackupPlan plan = PlanBackups(p, Topology{}, {{"m01", "m01:7000"}}, {});
  EXPECT_EQ(plan.slots[0].backup_machine, "m02");
  EXPECT_TRUE(plan.slots[0].backup_addr.empty());
}

TEST(BackupPlan, EvictedMachinesSlotGoesToTheStandbyAndBackupsAreReHomed) {
  // The policy itself swaps s01 into m02's slot; the plan follows.
  Job job;
  job.StartAndRun(10);
  const Placement before = job.state().placement;
  job.Do(testing::DeviceFailed("m02", S(105)));
  const Placement after = job.state().placement;
  ASSERT_EQ(after.slots, (std::vector<MachineId>{"m01", "s01", "m03", "m04"}));

  EXPECT_EQ(Ring(PlanBackups(before, Topology{}, Addrs(before.slots), {})),
            (std::vector<std::string>{"m01->m02", "m02->m03", "m03->m04", "m04->m01"}));
  const BackupPlan plan = PlanBackups(after, Topology{}, Addrs(after.slots), {});
  // m01's peer was evicted: it backs up to the standby now, and the standby
  // that joined gets m02's old peer.
  EXPECT_EQ(Ring(plan), (std::vector<std::string>{"m01->s01", "s01->m03", "m03->m04", "m04->m01"}));
  EXPECT_EQ(plan.slots[0].backup_addr, "s01:7000");
}

TEST(BackupPlan, StandbysRanksRestoreFromTheEvictedMachinesBackupPeer) {
  const Placement before = Slots({"m01", "m02", "m03"});
  std::vector<ShardHolding> held = SteadyHoldings(before, 40);
  // m02 is gone (its agent no longer reports), and s01 is new and empty.
  held.erase(std::remove_if(held.begin(), held.end(), [](const ShardHolding& h) { return h.machine == "m02"; }),
             held.end());
  const Placement after = Slots({"m01", "s01", "m03"});
  const BackupPlan plan = PlanBackups(after, Topology{}, Addrs({"m01", "s01", "m03"}), held);
  // Ranks 2 and 3 (slot 1) were backed up on m03, m02's peer.
  EXPECT_EQ(Sources(plan, 2), (std::vector<std::string>{"m03@40b"}));
  EXPECT_EQ(Sources(plan, 3), (std::vector<std::string>{"m03@40b"}));
  // Ranks 4 and 5 (m03) are backed up on m01, untouched.
  EXPECT_EQ(Sources(plan, 4), (std::vector<std::string>{"m01@40b"}));
  // Ranks 0 and 1 were backed up on m02: only m01's own memory is left...
  EXPECT_TRUE(Sources(plan, 0).empty());
  // ...and every route lists the slot's ranks only.
  for (const RestoreSource& s : plan.slots[1].restore_from) EXPECT_TRUE(s.rank == 2 || s.rank == 3);
}

TEST(BackupPlan, SourcesAreNewestFirstThenBackupsThenMachineOrder) {
  const Placement p = Slots({"m01", "m02"}, 1);
  const std::vector<ShardHolding> held = {
      {"m04", 0, 40, false},  // a primary left on the machine rank 0 moved away from
      {"m03", 0, 40, true},
      {"m02", 0, 39, true},
      {"m05", 0, 41, true},
      {"m06", 0, 40, true},
      {"m01", 0, 42, false},  // rank 0's own machine: not a route
      {"m07", 0, 43, true},   // no address: cannot serve
  };
  auto addrs = Addrs({"m01", "m02", "m03", "m04", "m05", "m06"});
  const BackupPlan plan = PlanBackups(p, Topology{}, addrs, held);
  EXPECT_EQ(Sources(plan, 0), (std::vector<std::string>{"m05@41b", "m03@40b", "m06@40b", "m04@40p", "m02@39b"}));
  EXPECT_EQ(plan.slots[0].restore_from[0].addr, "m05:7000");
  // The same holdings in another order give the same plan.
  std::vector<ShardHolding> reversed(held.rbegin(), held.rend());
  EXPECT_EQ(Sources(PlanBackups(p, Topology{}, addrs, reversed), 0), Sources(plan, 0));
}

// A pipeline job (ByteRobust §3): each rank's backup lies outside its PP
// and DP groups, so over-evicting either group never takes the backups of
// its own ranks with it.
TEST(BackupPlan, PipelineBackupsLieOutsideTheRanksPpAndDpGroups) {
  // DP 2 x PP 2, one rank per machine: rank = dp + 2 * pp.
  //   m01: (dp0, pp0)  m02: (dp1, pp0)  m03: (dp0, pp1)  m04: (dp1, pp1)
  const Placement p = Slots({"m01", "m02", "m03", "m04"}, 1);
  const Topology t{4, 1, 2};
  EXPECT_EQ(Ring(PlanBackups(p, t, Addrs(p.slots), {})),
            (std::vector<std::string>{"m01->m04", "m02->m03", "m03->m02", "m04->m01"}));
  // Every rank's peer shares neither group, checked against the topology.
  for (int slot = 0; slot < 4; ++slot) {
    const int peer = BackupSlotOf(p, t, slot);
    for (GroupKind k : {GroupKind::kPP, GroupKind::kDP}) {
      const ParallelGroup g = t.GroupOf(k, slot);
      EXPECT_EQ(std::count(g.ranks.begin(), g.ranks.end(), peer), 0) << "slot " << slot << " " << g.Name();
    }
  }
  // A pure data-parallel layout keeps the ring: its one DP group holds
  // every rank, so the peer is only outside the (absent) PP groups.
  EXPECT_EQ(Ring(PlanBackups(p, Topology{4, 1, 1}, Addrs(p.slots), {})),
            (std::vector<std::string>{"m01->m02", "m02->m03", "m03->m04", "m04->m01"}));
}

TEST(BackupPlan, PipelineFallsBackToTheStrictestTierTheLayoutAllows) {
  // DP 2 x PP 2 with two ranks per machine puts a stage's DP group on one
  // machine:
  //   m01: ranks 0, 1 (pp0)   m02: ranks 2, 3 (pp1)
  // Every other machine holds a rank of each pipeline: nothing lies outside
  // the PP groups, so the peer is simply another machine.
  const Placement p = Slots({"m01", "m02"}, 2);
  EXPECT_EQ(Ring(PlanBackups(p, Topology{4, 1, 2}, Addrs(p.slots), {})),
            (std::vector<std::string>{"m01->m02", "m02->m01"}));
  // DP 3 x PP 2 on six machines, one rank each: rank 0 (dp0, pp0) shares
  // its pipeline with rank 3 and its stage with ranks 1, 2; ranks 4, 5 are
  // outside both, and the first of them in ring order is chosen.
  const Placement six = Slots({"a", "b", "c", "d", "e", "f"}, 1);
  const Topology t6{6, 1, 2};
  EXPECT_EQ(BackupSlotOf(six, t6, 0), 4);
  EXPECT_EQ(BackupSlotOf(six, t6, 3), 1);
  // A layout that does not describe the placement's world has no groups.
  EXPECT_EQ(BackupSlotOf(six, Topology{4, 1, 2}, 0), 1);
}

}  // namespace
}  // namespace bulwark::controller
