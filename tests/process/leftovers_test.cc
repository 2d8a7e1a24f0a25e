// A test that ctest kills leaves nothing running (support/leftovers.h).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "support/process.h"

namespace bulwark::testing {
namespace {

// Running, not a zombie that nobody has reaped yet (kill(pid, 0) succeeds on
// those).
bool Alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

// Polls `done` every 50 ms until it holds or `timeout_s` passes.
template <typename F>
bool PollFor(F done, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

// Run as the test's victim (the same binary, the same case, the variable
// set): starts a daemon as `bulwark up` does, out of its session and
// reparented to init, prints its pid and waits to be killed.
void BeTheVictim() {
  ProcessResult r = Run({"/bin/sh", "-c", "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!"});
  std::printf("daemon %s\n", r.LastLine().c_str());
  std::fflush(stdout);
  for (;;) ::pause();
}

TEST(Leftovers, ADaemonATestStartedDiesWhenCtestKillsTheTest) {
  if (std::getenv("BULWARK_LEFTOVERS_VICTIM")) BeTheVictim();
  char self[4096] = {};
  ASSERT_GT(::readlink("/proc/self/exe", self, sizeof self - 1), 0);
  Process victim({self, "--gtest_filter=Leftovers.ADaemonATestStartedDiesWhenCtestKillsTheTest"},
                 {{"BULWARK_LEFTOVERS_VICTIM", "1"}});
  ASSERT_TRUE(victim.WaitForOutput("daemon ", 30)) << victim.OutputSoFar();
  std::string out;
  ASSERT_TRUE(PollFor([&] { return (out = victim.OutputSoFar()).find('\n', out.find("daemon ")) != std::string::npos; }, 10));
  const pid_t daemon = static_cast<pid_t>(std::atol(out.c_str() + out.find("daemon ") + 7));
  ASSERT_GT(daemon, 0) << out;
  ASSERT_TRUE(Alive(daemon)) << "the victim's daemon should run while the victim does";
  // What ctest does at a test's timeout: stop the test, then SIGKILL it.
  ::kill(victim.pid(), SIGSTOP);
  ::kill(victim.pid(), SIGKILL);
  EXPECT_EQ(victim.Wait(10).signal, SIGKILL);
  EXPECT_TRUE(PollFor([&] { return !Alive(daemon); }, 15)) << "pid " << daemon << " outlived the test that started it";
  if (Alive(daemon)) ::kill(daemon, SIGKILL);
}

}  // namespace
}  // namespace bulwark::testing
