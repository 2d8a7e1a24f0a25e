// The emulated slow machine (trainer/diag/pace.h): the pace file as the
// ranks read it, and the stretch itself, which must make a step's compute
// F x what it was while another process competes for the same core.
#include "trainer/diag/pace.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

#include "support/process.h"

namespace bulwark::trainer {
namespace {

TEST(PaceFile, ReadsTheFactorAndFollowsTheFile) {
  const std::string path = testing::MakeTempDir() + "/pace";
  ::setenv("BULWARK_PACE_FILE", path.c_str(), 1);
  std::optional<PaceFile> p = PaceFile::FromEnv();
  ::unsetenv("BULWARK_PACE_FILE");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->factor(), 1.0) << "no file: healthy";
  std::ofstream(path) << "2.000000\n";
  p->Poll();
  EXPECT_EQ(p->factor(), 2.0);
  ::usleep(20 * 1000);  // a new mtime
  std::ofstream(path) << "1\n";  // a repair
  p->Poll();
  EXPECT_EQ(p->factor(), 1.0);
  ::usleep(20 * 1000);
  std::ofstream(path) << "fast\n";
  p->Poll();
  EXPECT_EQ(p->factor(), 1.0) << "garbage is no slowdown";
  EXPECT_FALSE(PaceFile::FromEnv().has_value()) << "unset: not under the local backend";
}

// A fixed amount of arithmetic: the same work each call.
double PaceWork() {
  double x = 0;
  for (int i = 1; i < 6000000; ++i) x += std::sqrt(static_cast<double>(i)) * 1e-9;
  return x;
}

struct PaceMeasured {
  double device_ms, wall_ms;
};

PaceMeasured PacedStep(double factor) {
  StepCompute c(/*cpu_device=*/true);
  const auto t0 = std::chrono::steady_clock::now();
  c.Begin();
  volatile double sink = PaceWork();
  (void)sink;
  c.Stretch(factor, 0);
  const double device = c.Ms(0);
  return {device, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count()};
}

// Both this process and a busy loop pinned to one core: the step's wall
// time is the scheduler's business, but its device time (the CPU time the
// compute took) stretches by the factor, and so does its wall time with it.
TEST(StepCompute, AStretchedStepComputesFTimesUnderACompetingBusyProcess) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(0, &one);
  cpu_set_t before;
  ASSERT_EQ(::sched_getaffinity(0, sizeof before, &before), 0);
  ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
  const pid_t busy = ::fork();
  ASSERT_GE(busy, 0);
  if (busy == 0) {
    for (volatile uint64_t i = 0;; ++i) {
    }
  }
  auto median_of_3 = [](double f) {
    PaceMeasured m[3] = {PacedStep(f), PacedStep(f), PacedStep(f)};
    std::sort(m, m + 3, [](const PaceMeasured& a, const PaceMeasured& b) { return a.device_ms < b.device_ms; });
    return m[1];
  };
  const PaceMeasured base = median_of_3(1.0), twice = median_of_3(2.0), half_again = median_of_3(1.5);
  ::kill(busy, SIGKILL);
  ::waitpid(busy, nullptr, 0);
  ::sched_setaffinity(0, sizeof before, &before);
  const double r2 = twice.device_ms / base.device_ms, r15 = half_again.device_ms / base.device_ms;
  std::printf("[ figure ] beside a busy process on one core: F=2 computes %.2fx (wall %.2fx), F=1.5 %.2fx (wall %.2fx); "
              "base %.0f ms CPU, %.0f ms wall\n",
              r2, twice.wall_ms / base.wall_ms, r15, half_again.wall_ms / base.wall_ms, base.device_ms, base.wall_ms);
  EXPECT_GT(base.device_ms, 5.0);
  EXPECT_NEAR(r2, 2.0, 0.25);
  EXPECT_NEAR(r15, 1.5, 0.2);
  EXPECT_GT(twice.wall_ms, base.wall_ms) << "the job really slows";
}

TEST(StepCompute, AHealthyStepIsNotStretched) {
  StepCompute c(true);
  c.Begin();
  volatile double sink = PaceWork();
  (void)sink;
  const double before = c.Ms(0);
  c.Stretch(1.0, 0);
  c.Stretch(0.5, 0);
  // CPU time, so a preempted test cannot look stretched.
  EXPECT_LT(c.Ms(0) - before, 0.2 * before) << "factor 1 and below burn nothing";
}

}  // namespace
}  // namespace bulwark::trainer
