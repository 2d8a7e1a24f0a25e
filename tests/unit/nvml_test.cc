// The agent's NVML device check against tests/fake_nvml: the real loader
// (dlopen, symbol lookup, nvmlInit_v2) and the real reader, with each fault
// written into the fake's state file the way a failing GPU would show it.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "agent/gpu_health.h"
#include "agent/inspector.h"
#include "agent/nvml.h"
#include "support/process.h"

namespace bulwark {
namespace {

using agent::GpuHealth;
using agent::GpuVerdict;

class FakeNvml : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir();
    state_ = dir_ + "/nvml-state";
    ::setenv("BULWARK_FAKE_NVML_STATE", state_.c_str(), 1);
    Write("gpus 2\n");
  }
  void TearDown() override { ::unsetenv("BULWARK_FAKE_NVML_STATE"); }

  // Atomic (a rename): the fake re-reads the file on every call.
  void Write(const std::string& text) {
    std::ofstream(state_ + ".tmp") << text;
    ASSERT_EQ(std::rename((state_ + ".tmp").c_str(), state_.c_str()), 0);
  }

  std::unique_ptr<GpuHealth> Open() {
    auto gpu = GpuHealth::Open(BULWARK_FAKE_NVML, [this](const std::string& l) { log_.push_back(l); });
    EXPECT_NE(gpu, nullptr) << (log_.empty() ? "" : log_.back());
    return gpu;
  }

  // Reads until `pred` holds (an Xid arrives on the event thread) or 10 s pass.
  GpuVerdict ReadUntil(GpuHealth& gpu, const std::function<bool(const GpuVerdict&)>& pred) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    GpuVerdict v = gpu.Read();
    while (!pred(v) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      v = gpu.Read();
    }
    return v;
  }

  std::string dir_, state_;
  std::vector<std::string> log_;
};

TEST_F(FakeNvml, HealthyGpusReadOkAndCountsPresentAtStartAreTheBaseline) {
  Write("gpus 2\necc 0 5\nremap 1 3 0 0 0\nthrottle 0 0x4\n");  // old errors, a GPU at its power cap
  auto gpu = Open();
  ASSERT_NE(gpu, nullptr);
  EXPECT_EQ(gpu->nvml().gpus(), 2u);
  const GpuVerdict v = gpu->Read();
  EXPECT_TRUE(v.ok) << v.detail;
  EXPECT_EQ(v.slowdown, "");
  ASSERT_EQ(log_.size(), 1u);
  EXPECT_NE(log_[0].find("2 GPU(s)"), std::string::npos) << log_[0];
}

TEST_F(FakeNvml, UncorrectableEccRiseFailsTheDeviceUntilRebaselined) {
  auto gpu = Open();
  ASSERT_NE(gpu, nullptr);
  Write("gpus 2\necc 1 3\n");
  GpuVerdict v = gpu->Read();
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.detail, "GPU 1: uncorrectable ECC errors rose 0 -> 3");
  EXPECT_FALSE(gpu->Read().ok) << "a rise stays reported until the machine is repaired";
  gpu->Rebaseline();
  EXPECT_TRUE(gpu->Read().ok);
  Write("gpus 2\necc 1 4\n");
  EXPECT_EQ(gpu->Read().detail, "GPU 1: uncorrectable ECC errors rose 3 -> 4");
}

TEST_F(FakeNvml, EccOffIsNotAFailureAndItsFirstCountIsTheBaseline) {
  Write("gpus 1\necc-off 0\n");
  auto gpu = Open();
  ASSERT_NE(gpu, nullptr);
  EXPECT_TRUE(gpu->Read().ok);
  Write("gpus 1\necc 0 4\n");  // readable now: old errors, not a rise from 0
  EXPECT_TRUE(gpu->Read().ok);
  Write("gpus 1\necc 0 5\n");
  EXPECT_EQ(gpu->Read().detail, "GPU 0: uncorrectable ECC errors rose 4 -> 5");
}

TEST_F(FakeNvml, PendingAndFailedRowRemapsFailTheDevice) {
  auto gpu = Open();
  ASSERT_NE(gpu, nullptr);
  Write("gpus 2\nremap 0 0 2 1 0\n");
  GpuVerdict v = gpu->Read();
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.detail, "GPU 0: a row remap is pending (2 uncorrectable rows; reset the GPU)");
  Write("gpus 2\nremap 1 0 9 0 1\n");
  v = gpu->Read();
  EXPECT_EQ(v.detail, "GPU 1: row remapping failed (9 uncorrectable rows; the GPU needs service)");
  // Hardware state, not a rise: a rebaseline does not hide it.
  gpu->Rebaseline();
  EXPECT_FALSE(gpu->Read().ok);
}

TEST_F(FakeNvml, ALostGpuIsOneLine) {
  auto gpu = Open();
  ASSERT_NE(gpu, nullptr);
  Write("gpus 2\nlost 1\n");
  const GpuVerdict v = gpu->Read();
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.detail, "GPU 1 is lost (fallen off the bus or hung): GPU is lost (15)");
}

TEST_F(FakeNvml, ALostGpuAtStartKeepsItsSlot) {
  Write("gpus 2\nlost 0\n");
  auto gpu = Open();
  ASSERT_NE(gpu, nullptr);
  const GpuVerdict v = gpu->Read();
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.detail.find("GPU 0 is lost"), std::string::npos) << v.detail;
  EXPECT_EQ(v.detail.find("GPU 1"), std::string::npos) << v.detail;
}

TEST_F(FakeNvml, CriticalXidFailsTheDeviceAndApplicationXidsDoNot) {
  auto gpu = Open();
  ASSERT_NE(gpu, nullptr);
  Write("gpus 2\nxid 1 13\n");  // a graphics engine exception: the user's kernel
  Write("gpus 2\nxid 1 13\nxid 1 79\n");
  const GpuVerdict v = ReadUntil(*gpu, [](const GpuVerdict& v) { return !v.ok; });
  EXPECT_EQ(v.detail, "GPU 1: Xid 79 (fallen off the bus)");
  bool said_13 = false;
  for (const std::string& l : log_) said_13 |= l.find("Xid 13 (not a hardware fault") != std::string::npos;
  EXPECT_TRUE(said_13);
  gpu->Rebaseline();
  EXPECT_TRUE(gpu->Read().ok);
}

TEST_F(FakeNvml, XidsBeforeRegistrationAreNotNews) {
  Write("gpus 1\nxid 0 48\n");
  auto gpu = Open();
  ASSERT_NE(gpu, nullptr);
  Write("gpus 1\nxid 0 48\nxid 0 94\n");
  const GpuVerdict v = ReadUntil(*gpu, [](const GpuVerdict& v) { return !v.ok; });
  EXPECT_EQ(v.detail, "GPU 0: Xid 94 (contained ECC error)");
}

TEST_F(FakeNvml, ThermalSlowdownIsAHintNotAFailure) {
  auto gpu = Open();
  ASSERT_NE(gpu, nullptr);
  Write("gpus 2\nthrottle 1 0x48\n");
  const GpuVerdict v = gpu->Read();
  EXPECT_TRUE(v.ok) << v.detail;
  EXPECT_EQ(v.slowdown, "GPU 1 slowed down: hardware slowdown, thermal (hardware)");
  Write("gpus 2\nthrottle 1 0x4\n");  // at the software power cap: normal under load
  EXPECT_EQ(gpu->Read().slowdown, "");
}

TEST_F(FakeNvml, NoEventsIsOneWarningAndTheReadsGoOn) {
  Write("gpus 1\nevents 3\n");
  auto gpu = Open();
  ASSERT_NE(gpu, nullptr);
  ASSERT_EQ(log_.size(), 2u);
  EXPECT_NE(log_[1].find("warning: NVML Xid events unavailable: Not Supported"), std::string::npos) << log_[1];
  Write("gpus 1\nevents 3\necc 0 1\n");
  EXPECT_EQ(gpu->Read().detail, "GPU 0: uncorrectable ECC errors rose 0 -> 1");
}

TEST_F(FakeNvml, TheInspectorAddsNvmlToTheEmulatedDevice) {
  auto gpu = Open();
  ASSERT_NE(gpu, nullptr);
  const agent::InspectorPaths paths{dir_ + "/device", dir_ + "/nic", dir_};
  ASSERT_TRUE(cluster::Repair(paths.Hardware()).ok());
  EXPECT_TRUE(agent::Inspect(paths, gpu.get()).device_ok);
  Write("gpus 2\necc 0 2\nthrottle 0 0x20\n");
  agent::HealthReading h = agent::Inspect(paths, gpu.get());
  EXPECT_FALSE(h.device_ok);
  EXPECT_EQ(h.device_detail, "GPU 0: uncorrectable ECC errors rose 0 -> 2");
  EXPECT_EQ(h.device_slowdown, "GPU 0 slowed down: thermal (software)");
  // The machine returned after repair (the controller mends the emulated
  // parts, the agent rebaselines NVML): both sources healthy again.
  ASSERT_TRUE(cluster::Repair(paths.Hardware()).ok());
  gpu->Rebaseline();
  h = agent::Inspect(paths, gpu.get());
  EXPECT_TRUE(h.device_ok) << h.device_detail;
  // The local fault injector's file still counts beside NVML.
  std::ofstream(paths.device) << "Xid 48: injected\n";
  h = agent::Inspect(paths, gpu.get());
  EXPECT_FALSE(h.device_ok);
  EXPECT_EQ(h.device_detail, "Xid 48: injected");
}

// Bad input: one warning, no reader (the caller keeps the emulated device).
TEST(NvmlLoad, AMissingLibraryIsOneWarning) {
  std::vector<std::string> log;
  auto gpu = GpuHealth::Open("/nonexistent/libnvidia-ml.so.1", [&](const std::string& l) { log.push_back(l); });
  EXPECT_EQ(gpu, nullptr);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].rfind("warning: NVML /nonexistent/libnvidia-ml.so.1 cannot be loaded", 0), 0u) << log[0];
  EXPECT_NE(log[0].find("BULWARK_NVML_LIB"), std::string::npos) << log[0];
  EXPECT_NE(log[0].find("emulated device file"), std::string::npos) << log[0];
}

TEST(NvmlLoad, ALibraryThatIsNotNvmlIsNamed) {
  std::vector<std::string> log;
  auto gpu = GpuHealth::Open("libz.so.1", [&](const std::string& l) { log.push_back(l); });
  EXPECT_EQ(gpu, nullptr);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("libz.so.1 lacks nvmlInit_v2 and 11 more entry points"), std::string::npos) << log[0];
}

TEST(NvmlLoad, ADriverThatDoesNotInitializeIsOneWarning) {
  const std::string dir = testing::MakeTempDir();
  std::ofstream(dir + "/state") << "init 9\n";
  ::setenv("BULWARK_FAKE_NVML_STATE", (dir + "/state").c_str(), 1);
  std::vector<std::string> log;
  auto gpu = GpuHealth::Open(BULWARK_FAKE_NVML, [&](const std::string& l) { log.push_back(l); });
  ::unsetenv("BULWARK_FAKE_NVML_STATE");
  EXPECT_EQ(gpu, nullptr);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("nvmlInit_v2 failed: Driver Not Loaded (9)"), std::string::npos) << log[0];
}

TEST(NvmlLoad, TheLibraryComesFromTheEnvironment) {
  ::unsetenv("BULWARK_NVML_LIB");
  EXPECT_EQ(agent::Nvml::LibraryPath(), "libnvidia-ml.so.1");
  ::setenv("BULWARK_NVML_LIB", "/opt/nvidia/libnvidia-ml.so.1", 1);
  EXPECT_EQ(agent::Nvml::LibraryPath(), "/opt/nvidia/libnvidia-ml.so.1");
  ::unsetenv("BULWARK_NVML_LIB");
}

TEST(NvmlXids, TheCriticalTableNamesHardwareFaultsOnly) {
  EXPECT_STREQ(agent::CriticalXidName(79), "fallen off the bus");
  EXPECT_STREQ(agent::CriticalXidName(48), "double-bit ECC error");
  EXPECT_STREQ(agent::CriticalXidName(74), "NVLink error");
  EXPECT_STREQ(agent::CriticalXidName(13), "");  // graphics engine exception: the application's
  EXPECT_STREQ(agent::CriticalXidName(31), "");  // memory page fault: the application's
}

}  // namespace
}  // namespace bulwark
