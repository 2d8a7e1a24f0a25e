// The local backend's emulated hardware (cluster/local/): the parts'
// files, the slow injector, and the emulator the controller drives.
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
#include "cluster/local/slow_injector.h"
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

// The slow injector stops and resumes real processes, and leaves none stopped.
TEST(SlowInjector, DutyCyclesAndResumesOnStop) {
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    for (;;) {
    }
  }
  cluster::SlowInjector slow([child] { return std::set<pid_t>{child}; });
  slow.Start(4.0);  // stopped 75 ms of every 100
  int stopped = 0;
  for (int i = 0; i < 40; ++i) {
    ::usleep(10 * 1000);
    std::ifstream in("/proc/" + std::to_string(child) + "/stat");
    std::string line;
    std::getline(in, line);
    stopped += line.find(") T ") != std::string::npos;
  }
  slow.Stop();
  ::usleep(20 * 1000);
  std::ifstream in("/proc/" + std::to_string(child) + "/stat");
  std::string after;
  std::getline(in, after);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_GT(stopped, 10) << "the process was seen stopped in " << stopped << " of 40 samples";
  EXPECT_EQ(after.find(") T "), std::string::npos) << "left stopped: " << after;
}

// The local backend's emulator slows the processes that compute on a
// machine (those holding its device, BULWARK_SDC_FILE) under its agent, not
// the agent's other children; a repair frees them; a new emulator (a
// restarted controller) resumes a slowdown the machine's hardware holds.
TEST(Emulator, SlowsTheMachinesComputingProcessesUntilRepaired) {
  const std::string dir = testing::MakeTempDir();
  const cluster::Layout layout{dir};
  ASSERT_EQ(::system(("mkdir -p " + layout.health("m01")).c_str()), 0);
  // This test process stands for m01's agent.
  std::ofstream(layout.agent_pid("m01")) << ::getpid() << "\n";
  auto spawn = [](bool device) {
    const pid_t c = ::fork();
    if (c == 0) {
      if (device) ::setenv("BULWARK_SDC_FILE", "/dev/null", 1);
      ::execlp("sleep", "sleep", "30", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    return c;
  };
  const pid_t rank = spawn(true), helper = spawn(false);
  ::usleep(100 * 1000);  // both exec'd
  EXPECT_EQ(cluster::ComputingProcesses(layout, "m01"), std::set<pid_t>{rank});
  auto stopped_in = [](pid_t p) {
    int n = 0;
    for (int i = 0; i < 40; ++i, ::usleep(10 * 1000)) {
      std::ifstream in("/proc/" + std::to_string(p) + "/stat");
      std::string line;
      std::getline(in, line);
      n += line.find(") T ") != std::string::npos;
    }
    return n;
  };
  {
    cluster::Emulator e(layout);
    ASSERT_TRUE(e.Inject("m01", "slow", 4.0, "").ok());
    EXPECT_GT(stopped_in(rank), 10);
    EXPECT_EQ(stopped_in(helper), 0) << "not a computing process";
  }
  EXPECT_EQ(stopped_in(rank), 0) << "an emulator that ends leaves no process stopped";
  cluster::Emulator restarted(layout);
  EXPECT_GT(stopped_in(rank), 10) << "the machine's hardware is still slow";
  ASSERT_TRUE(restarted.Repair("m01").ok());
  EXPECT_EQ(stopped_in(rank), 0);
  EXPECT_EQ(cluster::ComputeSlowdown(cluster::HardwareOf(dir, "m01")), 1.0);
  for (pid_t p : {rank, helper}) {
    ::kill(p, SIGKILL);
    ::waitpid(p, nullptr, 0);
  }
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
