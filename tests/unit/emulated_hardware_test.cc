// The local backend's emulated hardware (cluster/local/): the parts'
// files and the emulator the controller drives.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include "cluster/layout.h"
#include "cluster/local/emulated_hardware.h"
#include "cluster/local/emulator.h"
#include "cluster/local/local_cluster.h"
#include "support/process.h"

namespace bulwark {
namespace {

// `bulwark down` and `up` ask whether the cluster's processes still run. An
// exited one that its parent has not reaped answers kill(0) for as long as
// the parent takes (init, here, took 1.9 s): it is not running.
TEST(LocalCluster, AnExitedProcessNotYetReapedIsNotRunning) {
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  EXPECT_TRUE(cluster::Running(child));
  ::kill(child, SIGTERM);
  // Exited, unreaped: wait for the zombie without reaping it.
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT), 0);
  EXPECT_EQ(::kill(child, 0), 0) << "a zombie still answers kill(0)";
  EXPECT_FALSE(cluster::Running(child));
  ::waitpid(child, nullptr, 0);
  EXPECT_FALSE(cluster::Running(child));
  EXPECT_FALSE(cluster::Running(0));
}

// `inject slow` is the machine's pace in its emulated hardware, which its
// ranks read (trainer/diag/pace.h): it stays when the controller that
// wrote it is gone (a new emulator reads the same files), a second factor
// replaces the first, and a repair ends it.
TEST(Emulator, ASlowMachineIsItsHardwaresPaceUntilRepaired) {
  const std::string dir = testing::MakeTempDir();
  const cluster::Layout layout{dir};
  ASSERT_EQ(::system(("mkdir -p " + layout.health("m01") + " " + layout.health("m02")).c_str()), 0);
  {
    cluster::Emulator e(layout);
    ASSERT_TRUE(e.Inject("m01", "slow", 2.0, "").ok());
  }
  EXPECT_EQ(cluster::ComputeSlowdown(cluster::HardwareOf(dir, "m01")), 2.0) << "outlives the controller";
  EXPECT_EQ(cluster::ComputeSlowdown(cluster::HardwareOf(dir, "m02")), 1.0) << "another machine is untouched";
  cluster::Emulator restarted(layout);
  ASSERT_TRUE(restarted.Inject("m01", "slow", 1.5, "").ok());
  EXPECT_EQ(cluster::ComputeSlowdown(cluster::HardwareOf(dir, "m01")), 1.5);
  ASSERT_TRUE(restarted.Repair("m01").ok());
  EXPECT_EQ(cluster::ComputeSlowdown(cluster::HardwareOf(dir, "m01")), 1.0);
}

// The emulated hardware: a flapped NIC comes back by itself at its time, a
// broken ALU and a slowed link read as such, and a repair mends every part.
TEST(EmulatedHardware, AFlapEndsByItselfAndARepairMendsEveryPart) {
  const std::string dir = testing::MakeTempDir();
  const cluster::EmulatedHardware hw = cluster::HardwareOf(dir, "m01");
  ASSERT_EQ(::system(("mkdir -p " + dir + "/machines/m01/health").c_str()), 0);
  EXPECT_TRUE(cluster::NicUp(hw, 0)) << "no file: nothing took the link down";
  ASSERT_TRUE(cluster::FlapNic(hw, std::chrono::milliseconds(2000), 10000).ok());
  EXPECT_FALSE(cluster::NicUp(hw, 11999));
  EXPECT_EQ(cluster::NicCarrierChanges(hw, 11999), 1u);
  EXPECT_TRUE(cluster::NicUp(hw, 12000));
  EXPECT_EQ(cluster::NicCarrierChanges(hw, 12000), 2u);
  // A second flap counts on: an inspection that never saw the link up
  // between the two still sees two more carrier changes.
  ASSERT_TRUE(cluster::FlapNic(hw, std::chrono::milliseconds(2000), 12100).ok());
  EXPECT_EQ(cluster::NicCarrierChanges(hw, 12200), 3u);
  EXPECT_EQ(cluster::NicCarrierChanges(hw, 14100), 4u);
  ASSERT_TRUE(cluster::FailDevice(hw).ok());
  ASSERT_TRUE(cluster::BreakAlu(hw).ok());
  ASSERT_TRUE(cluster::SlowLink(hw, 5).ok());
  EXPECT_NE(cluster::DeviceError(hw).find("Xid 48"), std::string::npos);
  EXPECT_TRUE(cluster::AluBroken(hw));
  EXPECT_EQ(cluster::LinkSlowdown(hw), 5);
  EXPECT_FALSE(cluster::SlowLink(hw, 0.5).ok()) << "a slowdown is a factor above 1";
  ASSERT_TRUE(cluster::Repair(hw).ok());
  EXPECT_EQ(cluster::DeviceError(hw), "");
  EXPECT_FALSE(cluster::AluBroken(hw));
  EXPECT_EQ(cluster::LinkSlowdown(hw), 1);
  EXPECT_TRUE(cluster::NicUp(hw, 0));
}

}  // namespace
}  // namespace bulwark
