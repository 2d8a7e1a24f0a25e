#include "controller/backup_plan.h"

#include <algorithm>
#include <tuple>

namespace bulwark::controller {

bool SharesGroup(const Placement& placement, const Topology& layout, int a, int b, GroupKind kind) {
  const int rpm = placement.ranks_per_machine;
  if (layout.world != placement.world_size() || !layout.Validate().ok()) return false;
  for (int r = a * rpm; r < (a + 1) * rpm; ++r) {
    const ParallelGroup g = layout.GroupOf(kind, r);
    if (g.ranks.size() < 2) continue;
    for (int q : g.ranks) {
      if (q / rpm == b) return true;
    }
  }
  return false;
}

int BackupSlotOf(const Placement& placement, const Topology& layout, int slot) {
  const int n = static_cast<int>(placement.slots.size());
  // Tiers, strictest first: outside PP and DP groups; outside PP groups; any.
  for (int tier = 0; tier < 3; ++tier) {
    for (int k = 1; k < n; ++k) {
      const int peer = (slot + k) % n;
      if (placement.slots[peer] == placement.slots[slot]) continue;
      if (tier < 2 && SharesGroup(placement, layout, slot, peer, GroupKind::kPP)) continue;
      if (tier < 1 && SharesGroup(placement, layout, slot, peer, GroupKind::kDP)) continue;
      return peer;
    }
  }
  return -1;
}

BackupPlan PlanBackups(const Placement& placement, const Topology& layout,
                       const std::map<MachineId, std::string>& shard_addrs, const std::vector<ShardHolding>& holdings) {
  auto addr_of = [&](const MachineId& m) -> std::string {
    auto it = shard_addrs.find(m);
    return it == shard_addrs.end() ? std::string() : it->second;
  };
  BackupPlan plan;
  const int rpm = placement.ranks_per_machine;
  for (int slot = 0; slot < static_cast<int>(placement.slots.size()); ++slot) {
    SlotRoute route;
    route.machine = placement.slots[slot];
    if (const int peer = BackupSlotOf(placement, layout, slot); peer >= 0) {
      route.backup_machine = placement.slots[peer];
      route.backup_addr = addr_of(route.backup_machine);
    }
    for (RankId rank = slot * rpm; rank < (slot + 1) * rpm; ++rank) {
      std::vector<RestoreSource> sources;
      for (const ShardHolding& h : holdings) {
        // The rank's own machine serves it from memory without being told;
        // a holder without an address cannot serve it at all.
        if (h.rank != rank || h.machine == route.machine) continue;
        std::string addr = addr_of(h.machine);
        if (addr.empty()) continue;
        sources.push_back({rank, h.machine, std::move(addr), h.step, h.backup});
      }
      std::sort(sources.begin(), sources.end(), [](const RestoreSource& a, const RestoreSource& b) {
        return std::make_tuple(-a.step, !a.backup, a.machine) < std::make_tuple(-b.step, !b.backup, b.machine);
      });
      route.restore_from.insert(route.restore_from.end(), sources.begin(), sources.end());
    }
    plan.slots.push_back(std::move(route));
  }
  // Who holds whose backup. Local writing (a replicated-state job) needs
  // every slot to be the peer of exactly one slot, so that each rank knows
  // its own backup is written by someone; otherwise none is listed and
  // backups go over the network.
  const int n = static_cast<int>(placement.slots.size());
  std::vector<int> holders(n, 0);
  for (int slot = 0; slot < n; ++slot)
    if (const int peer = BackupSlotOf(placement, layout, slot); peer >= 0) ++holders[peer];
  if (n > 1 && std::all_of(holders.begin(), holders.end(), [](int h) { return h == 1; })) {
    for (int slot = 0; slot < n; ++slot) {
      const int peer = BackupSlotOf(placement, layout, slot);
      for (RankId rank = slot * rpm; rank < (slot + 1) * rpm; ++rank) plan.slots[peer].backup_of.push_back(rank);
    }
  }
  return plan;
}

}  // namespace bulwark::controller
