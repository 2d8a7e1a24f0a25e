// Checkups in the simulator (issue 38 item 5, PolicyConfig::checkup_evicted):
// the machines a hang's or a slow machine's pipeline took on suspicion are
// checked off the job's path by the controller's own rule, the healthy ones
// come back to the pool, the faulty ones stay out, and fewer machines are
// ordered. Small, short runs only.
#include <gtest/gtest.h>

#include "sim/config.h"
#include "sim/sim.h"

namespace bulwark::sim {
namespace {

// 64 machines, TP 8 x PP 8 x DP 8, whole-world, 60 days, only hangs and
// slow machines, often (about 38 of each): each over-evicts a pipeline of 8
// machines into a pool of 16 standbys (a smaller pool narrows the eviction
// to the culprit, PolicyConfig::narrow_to_pool).
SimConfig Suspicious(bool checkup) {
  SimConfig c;
  c.gpus = 512;
  c.pp = 8;
  c.days = 60;
  c.recovery = SimConfig::Recovery::kWholeWorld;
  c.initial_standbys = 16;
  c.rates.per_machine_day.fill(0);
  c.rates.per_machine_day[static_cast<int>(FaultClass::kHang)] = 0.01;
  c.rates.per_machine_day[static_cast<int>(FaultClass::kFailSlow)] = 0.01;
  c.rates.manual_per_day = 0;
  c.rates.benign_spikes_per_day = 0;
  c.policy.checkup_evicted = checkup;
  return c;
}

TEST(SimCheckup, OverEvictedHealthyMachinesComeBackAndTheFaultyOnesStayOut) {
  Result<SimResult> on = Simulate(Suspicious(true));
  ASSERT_TRUE(on.ok()) << on.status().message();
  const FleetStats& f = on->fleet;
  EXPECT_EQ(f.refused, 0) << f.first_refusal;
  EXPECT_FALSE(f.stopped) << f.stop_reason;
  ASSERT_GT(f.healthy_evicted, 20);
  ASSERT_GT(f.checkups, 0);
  // Every checkup ends one way or the other, and only the healthy return:
  // the model's checkup finds every fault but a silent corruption (none here).
  EXPECT_EQ(f.checkup_returned + f.checkup_kept, f.checkups);
  EXPECT_EQ(f.checkup_returned_broken, 0);
  EXPECT_GT(f.checkup_returned, f.healthy_evicted / 2);
  EXPECT_GT(f.checkup_kept, 0) << "the slow and hung machines themselves fail their checkup";
  EXPECT_GT(f.checkup_return_mean_s, 0);
}

TEST(SimCheckup, ReturnsSaveOrdersAndCapacityOnTheSameTrace) {
  Result<SimResult> on = Simulate(Suspicious(true)), off = Simulate(Suspicious(false));
  ASSERT_TRUE(on.ok() && off.ok());
  EXPECT_EQ(on->fleet.trace_digest, off->fleet.trace_digest);
  EXPECT_EQ(off->fleet.checkups, 0);
  EXPECT_EQ(off->fleet.checkup_returned, 0);
  EXPECT_LT(on->fleet.standbys_requested, off->fleet.standbys_requested);
  EXPECT_LT(on->fleet.healthy_out_days, off->fleet.healthy_out_days / 10);
}

}  // namespace
}  // namespace bulwark::sim
