// The control plane at many machines (issue 36): what the controller
// computes under its lock for a job of N machines stays about linear in N,
// and gives the same answers as the definitions it replaces.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "controller/backup_plan.h"

namespace bulwark::controller {
namespace {

Placement Slots(int n, int rpm, int machines_distinct) {
  Placement p;
  p.generation = 1;
  p.ranks_per_machine = rpm;
  for (int i = 0; i < n; ++i) p.slots.push_back("m" + std::to_string(i % machines_distinct));
  return p;
}

std::map<MachineId, std::string> Addrs(const Placement& p) {
  std::map<MachineId, std::string> a;
  for (const MachineId& m : p.slots) a[m] = m + ":7000";
  return a;
}

// PlanBackups's peers and backup_of are BackupSlotOf's, slot by slot, for
// every layout of up to 24 ranks, on distinct machines and on shared ones.
TEST(PlaneScale, BackupPeersMatchTheDefinitionOnEveryLayout) {
  int cases = 0;
  for (int slots = 1; slots <= 12; ++slots) {
    for (int rpm : {1, 2}) {
      const int world = slots * rpm;
      for (int tp = 1; tp <= world; ++tp) {
        for (int pp = 1; tp * pp <= world; ++pp) {
          if (world % (tp * pp) != 0) continue;
          for (int distinct : {slots, std::max(1, slots / 2)}) {
            const Placement p = Slots(slots, rpm, distinct);
            for (const Topology& t : {Topology{world, tp, pp}, Topology{}}) {
              const BackupPlan plan = PlanBackups(p, t, Addrs(p), {});
              ASSERT_EQ(plan.slots.size(), p.slots.size());
              std::vector<int> holders(slots, 0);
              for (int s = 0; s < slots; ++s) {
                const int peer = BackupSlotOf(p, t, s);
                if (peer >= 0) ++holders[peer];
                EXPECT_EQ(plan.slots[s].backup_machine, peer >= 0 ? p.slots[peer] : "")
                    << "slot " << s << " of " << slots << " x" << rpm << " tp " << tp << " pp " << pp;
              }
              const bool local = slots > 1 && std::all_of(holders.begin(), holders.end(), [](int h) { return h == 1; });
              for (int s = 0; s < slots; ++s) {
                std::vector<RankId> want;
                for (int o = 0; local && o < slots; ++o) {
                  if (BackupSlotOf(p, t, o) != s) continue;
                  for (RankId r = o * rpm; r < (o + 1) * rpm; ++r) want.push_back(r);
                }
                EXPECT_EQ(plan.slots[s].backup_of, want) << "slot " << s;
              }
              ++cases;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 200);
}

// A data-parallel job of 12,500 machines, each holding its own copy and
// its predecessor's: the plan once took O(N^3 log N) (48 s under the
// controller's lock at 1,000 machines).
TEST(PlaneScale, PlanOfTwelveThousandFiveHundredMachinesIsQuick) {
  const int n = 12500;
  const Placement p = Slots(n, 1, n);
  std::vector<ShardHolding> held;
  for (int s = 0; s < n; ++s) {
    held.push_back({p.slots[s], s, 100, false});
    held.push_back({p.slots[(s + 1) % n], s, 100, true});
  }
  for (const Topology& t : {Topology{n, 1, 1}, Topology{n, 1, 5}}) {
    const auto t0 = std::chrono::steady_clock::now();
    const BackupPlan plan = PlanBackups(p, t, Addrs(p), held);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[ timing ] PlanBackups of %d slots, pp %d: %.3f s\n", n, t.pp, s);
    EXPECT_LT(s, 5.0);
    ASSERT_EQ(plan.slots.size(), static_cast<size_t>(n));
    ASSERT_EQ(plan.slots[0].restore_from.size(), 1u);
    EXPECT_EQ(plan.slots[0].restore_from[0].machine, p.slots[1]);
  }
  EXPECT_EQ(PlanBackups(p, Topology{n, 1, 1}, Addrs(p), {}).slots[0].backup_machine, p.slots[1]);
}

}  // namespace
}  // namespace bulwark::controller
