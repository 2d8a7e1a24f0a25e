#include "controller/backup_plan.h"

#include <algorithm>
#include <limits>
#include <tuple>
#include <unordered_map>
#include <utility>

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

namespace {

// The slots' PP and DP groups, indexed once per plan, so that finding a
// slot's backup peer walks the ring in jumps over whole runs of the slots
// that share a group with it, instead of building a group of the whole
// world for every pair. A pure data-parallel job of N machines has one DP
// group of N ranks; asked pair by pair, a plan was O(N^3 log N): 48 s under
// the controller's lock at N = 1,000 (issue 36). Same answers as
// SharesGroup and BackupSlotOf (plane_scale_test compares them slot by slot
// on every layout of up to 24 ranks).
class GroupIndex {
 public:
  GroupIndex(const Placement& placement, const Topology& layout) : placement_(placement) {
    const int n = static_cast<int>(placement.slots.size());
    const int rpm = placement.ranks_per_machine;
    groups_[0].resize(n);
    groups_[1].resize(n);
    // As SharesGroup: a layout that does not describe the world has no groups.
    if (layout.world != placement.world_size() || !layout.Validate().ok()) return;
    std::unordered_map<int, std::vector<int>> members[2];  // group id -> its slots, ascending
    for (int slot = 0; slot < n; ++slot) {
      for (int r = slot * rpm; r < (slot + 1) * rpm; ++r) {
        const Topology::Coord c = layout.Of(r);
        // A group's id: its rank whose coordinate of the group's kind is 0.
        if (layout.pp > 1) groups_[0][slot].push_back(layout.RankAt({c.dp, 0, c.tp}));
        if (layout.dp() > 1) groups_[1][slot].push_back(layout.RankAt({0, c.pp, c.tp}));
      }
      for (int kind = 0; kind < 2; ++kind) {
        std::vector<int>& ids = groups_[kind][slot];
        std::sort(ids.begin(), ids.end());
        ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
        for (int g : ids) members[kind][g].push_back(slot);
      }
    }
    // Each group's slots as runs of consecutive slots.
    for (int kind = 0; kind < 2; ++kind) {
      for (const auto& [g, slots] : members[kind]) {
        std::vector<std::pair<int, int>>& runs = runs_[kind][g];
        for (int s : slots) {
          if (!runs.empty() && runs.back().second + 1 == s) runs.back().second = s;
          else runs.push_back({s, s});
        }
      }
    }
  }

  // BackupSlotOf(placement, layout, slot).
  int PeerOf(int slot) const {
    const int n = static_cast<int>(placement_.slots.size());
    for (int tier = 0; tier < 3; ++tier) {
      // Ring positions slot + 1 .. slot + n - 1, unwrapped.
      for (int64_t u = slot + 1; u < slot + n;) {
        const int peer = static_cast<int>(u % n);
        // The end of the run of a group of slot's that holds peer, if any.
        int skip_to = -1;
        for (int kind = 0; kind < 2 - tier && skip_to < 0; ++kind) {
          for (int g : groups_[kind][slot]) {
            const std::vector<std::pair<int, int>>& runs = runs_[kind].at(g);
            auto it = std::upper_bound(runs.begin(), runs.end(), std::make_pair(peer, std::numeric_limits<int>::max()));
            if (it != runs.begin() && std::prev(it)->second >= peer) {
              skip_to = std::prev(it)->second;
              break;
            }
          }
        }
        if (skip_to >= 0) {
          u += skip_to - peer + 1;
        } else if (placement_.slots[peer] == placement_.slots[slot]) {
          ++u;
        } else {
          return peer;
        }
      }
    }
    return -1;
  }

 private:
  const Placement& placement_;
  // [0] PP, [1] DP: per slot, the ids of its ranks' groups of 2+ ranks; per
  // group id, its slots as runs [first, last].
  std::vector<std::vector<int>> groups_[2];
  std::unordered_map<int, std::vector<std::pair<int, int>>> runs_[2];
};

}  // namespace

BackupPlan PlanBackups(const Placement& placement, const Topology& layout,
                       const std::map<MachineId, std::string>& shard_addrs, const std::vector<ShardHolding>& holdings) {
  auto addr_of = [&](const MachineId& m) -> std::string {
    auto it = shard_addrs.find(m);
    return it == shard_addrs.end() ? std::string() : it->second;
  };
  // Each rank's copies, in the order reported (a scan of every holding per
  // rank was O(N^2) at N machines).
  std::unordered_map<RankId, std::vector<const ShardHolding*>> held;
  for (const ShardHolding& h : holdings) held[h.rank].push_back(&h);
  GroupIndex groups(placement, layout);
  const int n = static_cast<int>(placement.slots.size());
  std::vector<int> peers(n, -1);
  for (int slot = 0; slot < n; ++slot) peers[slot] = groups.PeerOf(slot);
  BackupPlan plan;
  const int rpm = placement.ranks_per_machine;
  for (int slot = 0; slot < n; ++slot) {
    SlotRoute route;
    route.machine = placement.slots[slot];
    if (const int peer = peers[slot]; peer >= 0) {
      route.backup_machine = placement.slots[peer];
      route.backup_addr = addr_of(route.backup_machine);
    }
    for (RankId rank = slot * rpm; rank < (slot + 1) * rpm; ++rank) {
      std::vector<RestoreSource> sources;
      auto copies = held.find(rank);
      for (const ShardHolding* h : copies == held.end() ? std::vector<const ShardHolding*>{} : copies->second) {
        // The rank's own machine serves it from memory without being told;
        // a holder without an address cannot serve it at all.
        if (h->machine == route.machine) continue;
        std::string addr = addr_of(h->machine);
        if (addr.empty()) continue;
        sources.push_back({rank, h->machine, std::move(addr), h->step, h->backup});
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
  std::vector<int> holders(n, 0);
  for (int slot = 0; slot < n; ++slot)
    if (peers[slot] >= 0) ++holders[peers[slot]];
  if (n > 1 && std::all_of(holders.begin(), holders.end(), [](int h) { return h == 1; })) {
    for (int slot = 0; slot < n; ++slot) {
      for (RankId rank = slot * rpm; rank < (slot + 1) * rpm; ++rank) plan.slots[peers[slot]].backup_of.push_back(rank);
    }
  }
  return plan;
}

}  // namespace bulwark::controller
