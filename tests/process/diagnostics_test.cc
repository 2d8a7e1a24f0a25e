// Stop-time diagnostics with real code and real processes: the agent's GEMM
// check, the emulated device's health, and bitwise alignment through
// `bulwark-train --align` (its hash the same across processes, different on
// a machine whose matmuls are silently corrupted).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <thread>

#include "agent/diagnostics.h"
#include "common/files.h"
#include "support/process.h"

namespace bulwark::agent {
namespace {

std::vector<std::string> Trainer(int threads = 1) {
  return {testing::BinDir() + "/bulwark-train", "--config", "tiny", "--align-threads", std::to_string(threads)};
}

// A machine's emulated matmul corruption as the agent names it: a file
// holding `spec` ("" none: no file).
std::string SdcFile(const std::string& spec) {
  if (spec.empty()) return "";
  const std::string path = testing::MakeTempDir() + "/sdc";
  EXPECT_TRUE(WriteFileAtomic(path, spec + "\n").ok());
  return path;
}

std::string Hash(const std::string& sdc = "", int threads = 1) {
  std::string h;
  TestOutcome o = AlignmentCheck(Trainer(threads), SdcFile(sdc), std::chrono::seconds(60), &h);
  EXPECT_TRUE(o.passed) << o.detail;
  EXPECT_EQ(h.size(), 16u) << o.detail;
  return h;
}

TEST(Diagnostics, ComputeCheckKnowsTheAnswerAndCatchesOneWrongElement) {
  TestOutcome ok = ComputeCheck();
  EXPECT_TRUE(ok.passed) << ok.detail;
  EXPECT_GT(ok.ms, 0);
  TestOutcome bad = ComputeCheck(/*corrupt=*/true);
  EXPECT_FALSE(bad.passed);
  EXPECT_NE(bad.detail.find(std::string("!= known answer ") + ComputeCheckAnswer()), std::string::npos) << bad.detail;
}

TEST(Diagnostics, DeviceCheckReadsTheEmulatedDevice) {
  const std::string dir = testing::MakeTempDir();
  InspectorPaths p{dir + "/device", dir + "/nic", dir};
  ASSERT_TRUE(WriteFileAtomic(p.device, std::string("ok\n")).ok());
  EXPECT_TRUE(DeviceCheck(p).passed);
  ASSERT_TRUE(WriteFileAtomic(p.device, std::string("Xid 79: GPU has fallen off the bus\n")).ok());
  TestOutcome bad = DeviceCheck(p);
  EXPECT_FALSE(bad.passed);
  EXPECT_NE(bad.detail.find("Xid 79"), std::string::npos) << bad.detail;
}

TEST(Diagnostics, AlignmentHashIsTheSameInEveryProcessAndDiffersUnderCorruption) {
  const std::string a = Hash(), b = Hash();
  EXPECT_EQ(a, b) << "two processes, same step, same bits";
  EXPECT_NE(Hash("drift"), a) << "one element off by 1e-3 relative changes the hash";
  EXPECT_NE(Hash("nan"), a);
}

// A job that is not bulwark-train's (a Python script) is checked with
// bulwark-train's tiny model: its own cannot be rebuilt outside it, and a
// machine that drifts drifts in any model.
TEST(Diagnostics, AJobOfAnotherProgramIsCheckedWithTheTinyModel) {
  const std::string trainer = testing::BinDir() + "/bulwark-train";
  const std::vector<std::string> own = {"/opt/x/bulwark-train", "--config", "small"};
  EXPECT_EQ(AlignmentArgv(own, trainer), own);
  EXPECT_EQ(AlignmentArgv({"python3", "train.py", "--lr", "3e-4"}, trainer),
            (std::vector<std::string>{trainer, "--config", "tiny"}));
  EXPECT_TRUE(AlignmentArgv({}, trainer).empty()) << "no job started here yet";
  std::string clean, drifted;
  const auto argv = AlignmentArgv({"python3", "train.py"}, trainer);
  EXPECT_TRUE(AlignmentCheck(argv, "", std::chrono::seconds(60), &clean).passed);
  EXPECT_TRUE(AlignmentCheck(argv, SdcFile("drift"), std::chrono::seconds(60), &drifted).passed);
  EXPECT_EQ(clean.size(), 16u);
  EXPECT_NE(clean, drifted) << "the drift shows in the tiny model's hash";
}

// The periodic check runs beside the ranks: the tiny model of the job's own
// bulwark-train, on the job's device, whatever the job's model (its memory
// is the ranks'). A Python job's check is the same as at stop time.
TEST(Diagnostics, BesideTheRanksTheCheckRunsTheTinyModelOnTheJobsDevice) {
  const std::string trainer = testing::BinDir() + "/bulwark-train";
  EXPECT_EQ(AlignmentArgv({"/opt/x/bulwark-train", "--config", "small", "--device", "cuda"}, trainer, true),
            (std::vector<std::string>{"/opt/x/bulwark-train", "--config", "tiny", "--device", "cuda"}));
  EXPECT_EQ(AlignmentArgv({"/opt/x/bulwark-train", "--device=cpu", "--d-model", "4096"}, trainer, true),
            (std::vector<std::string>{"/opt/x/bulwark-train", "--config", "tiny", "--device", "cpu"}));
  EXPECT_EQ(AlignmentArgv({"/opt/x/bulwark-train", "--config", "small"}, trainer, true),
            (std::vector<std::string>{"/opt/x/bulwark-train", "--config", "tiny", "--device", "auto"}));
  EXPECT_EQ(AlignmentArgv({"python3", "train.py"}, trainer, true),
            (std::vector<std::string>{trainer, "--config", "tiny"}));
  std::string h;
  EXPECT_TRUE(AlignmentCheck(AlignmentArgv({trainer, "--config", "small"}, trainer, true), "",
                             std::chrono::seconds(60), &h)
                  .passed);
  EXPECT_EQ(h, Hash()) << "the tiny model's hash, as every machine's";
}

// A job of another program is checked with the bulwark-train the agent's
// environment names (a CUDA build on a GPU machine), else the one beside it.
TEST(Diagnostics, TheTrainerAForeignJobIsCheckedWithCanBeNamed) {
  ::unsetenv("BULWARK_ALIGN_TRAINER");
  EXPECT_EQ(AlignmentTrainer("/usr/lib/bulwark/bulwark-train"), "/usr/lib/bulwark/bulwark-train");
  ::setenv("BULWARK_ALIGN_TRAINER", "/opt/gpu/bin/bulwark-train", 1);
  EXPECT_EQ(AlignmentTrainer("/usr/lib/bulwark/bulwark-train"), "/opt/gpu/bin/bulwark-train");
  EXPECT_EQ(AlignmentArgv({"python3", "train.py"}, AlignmentTrainer("/usr/lib/bulwark/bulwark-train")),
            (std::vector<std::string>{"/opt/gpu/bin/bulwark-train", "--config", "tiny"}));
  ::unsetenv("BULWARK_ALIGN_TRAINER");
}

// A GPU machine's run compares its GPUs with each other (trainer/diag/align.h)
// and says so when they disagree: the test fails with the GPU named, and the
// hash still goes to the controller. A program stands in for a GPU run here.
TEST(Diagnostics, GpusThatDisagreeFailTheMachineAndNameTheGpu) {
  auto run = [](const std::string& line, std::string* hash) {
    return AlignmentCheck({"sh", "-c", "echo '" + line + "'"}, "", std::chrono::seconds(10), hash);
  };
  std::string h;
  TestOutcome ok = run(R"({"align_hash":"00000000000012ab","device":"cuda","gpus":8})", &h);
  EXPECT_TRUE(ok.passed) << ok.detail;
  EXPECT_EQ(ok.detail, "hash 00000000000012ab on 8 GPU(s)");
  TestOutcome bad = run(R"({"align_hash":"7777777777777777","device":"cuda","gpus":8,)"
                        R"("gpus_disagree":"GPU 3 computed 0000000000000099; the other 7 GPUs 00000000000012ab"})",
                        &h);
  EXPECT_FALSE(bad.passed);
  EXPECT_EQ(h, "7777777777777777");
  EXPECT_EQ(bad.detail, "the machine's GPUs disagree: GPU 3 computed 0000000000000099; the other 7 GPUs "
                        "00000000000012ab (hash 7777777777777777 on 8 GPU(s))");
}

// Recorded rather than required: libtorch's CPU kernels may split a
// reduction by thread count, so the default is one thread everywhere and
// machines compare like with like (trainer/diag/align.h).
TEST(Diagnostics, AlignmentHashAcrossThreadCounts) {
  const std::string one = Hash("", 1), two = Hash("", 2), two_again = Hash("", 2);
  EXPECT_EQ(two, two_again) << "a fixed thread count is deterministic";
  std::printf("alignment hash: 1 thread %s, 2 threads %s (%s)\n", one.c_str(), two.c_str(),
              one == two ? "equal" : "differ");
}

TEST(Diagnostics, RunDiagnosticsRunsEachTestAndFailsWhatHasNoTimeLeft) {
  const std::string dir = testing::MakeTempDir();
  DiagnosticsRequest req;
  req.tests = {"compute", "device", "alignment"};
  req.health = {dir + "/device", dir + "/nic", dir};
  req.trainer_argv = Trainer();
  ASSERT_TRUE(WriteFileAtomic(req.health.device, std::string("ok\n")).ok());
  DiagnosticsOutcome o = RunDiagnostics(req);
  ASSERT_EQ(o.results.size(), 3u);
  for (const TestOutcome& t : o.results) EXPECT_TRUE(t.passed) << t.test << ": " << t.detail;
  EXPECT_EQ(o.alignment_hash.size(), 16u);

  req.trainer_argv.clear();
  DiagnosticsOutcome none = RunDiagnostics(req);
  EXPECT_FALSE(none.results[2].passed);
  EXPECT_NE(none.results[2].detail.find("no trainer command"), std::string::npos);

  req.budget = std::chrono::milliseconds(1);
  req.tests = {"compute", "alignment"};
  req.trainer_argv = Trainer();
  DiagnosticsOutcome late = RunDiagnostics(req);
  EXPECT_FALSE(late.results[1].passed) << "the compute check used up the 1 ms budget";
}

// One replay group of two processes (two "machines"): rank 0 speaks for
// the group; a silently corrupting member makes the group diverge.
TEST(Diagnostics, AReplayGroupWithAnSdcMemberDiverges) {
  auto replay = [](const std::string& sdc_on_rank1, int port) {
    ReplayGroup g0{"h0", 0, 2, "127.0.0.1", port}, g1{"h0", 1, 2, "127.0.0.1", port};
    TestOutcome r1;
    const std::string file = SdcFile(sdc_on_rank1);
    std::thread other([&] { r1 = ReplayCheck(Trainer(), file, g1, 3, std::chrono::seconds(60)); });
    TestOutcome r0 = ReplayCheck(Trainer(), "", g0, 3, std::chrono::seconds(60));
    other.join();
    EXPECT_TRUE(r1.passed) << r1.detail;
    EXPECT_EQ(r0.test, "replay/h0");
    return r0;
  };
  const int port = 14000 + static_cast<int>(::getpid() % 2000);  // below the ephemeral ports
  TestOutcome clean = replay("", port);
  EXPECT_TRUE(clean.passed) << clean.detail;
  TestOutcome clean2 = replay("", port + 1);
  EXPECT_EQ(clean.detail, clean2.detail) << "a replay is deterministic";
  TestOutcome bad = replay("nan", port + 2);
  EXPECT_FALSE(bad.passed);
  EXPECT_NE(bad.detail.find("diverged"), std::string::npos) << bad.detail;
}

// One network link of two processes (two "machines") over real Gloo: both
// ends pass, the first reports the link with its time, bandwidth and
// latency; the second end reports nothing unless it failed. A NIC that
// reads "down" fails at once, without waiting for the peer.
TEST(Diagnostics, ANetworkLinkIsMeasuredByBothEndsAndADownNicFailsIt) {
  const std::string dir = testing::MakeTempDir();
  InspectorPaths health{dir + "/device", dir + "/nic", dir};
  // The other end's link is degraded 10x (its emulated hardware).
  InspectorPaths slowed{dir + "/device", dir + "/nic", dir};
  slowed.link = dir + "/slow-link";
  ASSERT_TRUE(cluster::SlowLink(slowed.Hardware(), 10).ok());
  const std::string bin = testing::BinDir() + "/bulwark-train";
  const int port = 12000 + static_cast<int>(::getpid() % 2000);  // below the ephemeral ports
  ReplayGroup g0{"net0", 0, 2, "127.0.0.1", port}, g1{"net0", 1, 2, "127.0.0.1", port};
  TestOutcome r1;
  std::thread other([&] { r1 = NetworkCheck(bin, g1, slowed, std::chrono::seconds(60)); });
  TestOutcome r0 = NetworkCheck(bin, g0, health, std::chrono::seconds(60));
  other.join();
  EXPECT_TRUE(r0.passed) << r0.detail;
  EXPECT_TRUE(r1.passed) << r1.detail;
  EXPECT_EQ(r0.test, "network/net0");
  EXPECT_EQ(r1.test, "network-part/net0");
  EXPECT_GT(r0.ms, 0);
  EXPECT_NE(r0.detail.find(" MB/s, latency "), std::string::npos) << r0.detail;
  std::printf("[ figure ] one link, one end 10x slowed: %.1f ms, %s\n", r0.ms, r0.detail.c_str());

  ASSERT_TRUE(WriteFileAtomic(health.nic, std::string("down\n")).ok());
  TestOutcome down = NetworkCheck(bin, g0, health, std::chrono::seconds(60));
  EXPECT_FALSE(down.passed);
  EXPECT_EQ(down.detail, "the NIC is down");
  // A link check that fails says why in the incident, in its own words (its
  // error line on stderr), not only with its exit code. A stand-in that fails
  // as bulwark-train does when its peer never comes: the real one would take
  // its whole timeout, and longer to start on a loaded host.
  ASSERT_TRUE(WriteFileAtomic(health.nic, std::string("up\n")).ok());
  const std::string failing = dir + "/failing-check";
  ASSERT_TRUE(WriteFileAtomic(failing, std::string("#!/bin/sh\necho '{\"event\":\"x\"}'\n"
                                                   "echo 'bulwark-train: error: rendezvous at 127.0.0.1:1 failed for rank 1 "
                                                   "of 2: no rank 0 listening after 10 ms' >&2\nexit 3\n")).ok());
  ASSERT_EQ(::chmod(failing.c_str(), 0755), 0);
  TestOutcome alone = NetworkCheck(failing, g1, health, std::chrono::seconds(30));
  EXPECT_FALSE(alone.passed);
  EXPECT_EQ(alone.detail, "the link check exited with code 3 (rendezvous at 127.0.0.1:1 failed for rank 1 of 2: "
                          "no rank 0 listening after 10 ms)");
  // RunDiagnostics runs only the links for "network", not replay groups.
  DiagnosticsRequest req;
  req.tests = {"network"};
  req.health = health;
  req.net_check_binary = bin;
  req.replay = {{"h0", 0, 2, "127.0.0.1", port + 1}, {"net0", 0, 2, "127.0.0.1", port + 2}};
  req.budget = std::chrono::seconds(3);  // its peer never comes
  DiagnosticsOutcome out = RunDiagnostics(req);
  ASSERT_EQ(out.results.size(), 1u);
  EXPECT_EQ(out.results[0].test, "network/net0");
}

}  // namespace
}  // namespace bulwark::agent
