// The in-process tracer (libdw, agent/stack_unwind.h) against real
// processes: every thread, eu-stack's format (the stack analyzer groups its
// output exactly as eu-stack's), the process left running, clear errors,
// and its capture time beside eu-stack's.
#include <gtest/gtest.h>

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/inspector.h"
#include "agent/tracer.h"
#include "controller/stack_analyzer.h"

namespace bulwark {
namespace {

using agent::StackTool;
constexpr auto kBudget = std::chrono::milliseconds(10000);  // a loaded 2-core host

// Named frames the stacks must show. noinline: each is a frame of its own;
// different bodies, or the linker may fold them into one symbol.
__attribute__((noinline)) void ParkedWorker() {
  for (;;) ::pause();
}
__attribute__((noinline)) void ParkedMain() {
  volatile int wakeups = 0;
  for (;;) {
    ::pause();
    wakeups = wakeups + 1;
  }
}

int Threads(pid_t pid) {
  int n = 0;
  DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/task").c_str());
  if (d == nullptr) return 0;
  while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n;
}

// A child with a main thread and three workers, all parked in pause().
class Parked {
 public:
  Parked() {
    pid_ = ::fork();
    if (pid_ == 0) {
      for (int i = 0; i < 3; ++i) std::thread(ParkedWorker).detach();
      ParkedMain();
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (Threads(pid_) < 4 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~Parked() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

std::vector<pid_t> Tids(const std::string& text) {
  std::vector<pid_t> tids;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("TID ", 0) == 0) tids.push_back(static_cast<pid_t>(std::stol(line.substr(4))));
  }
  return tids;
}

TEST(Libdw, CapturesEveryThreadMainFirstInEuStacksFormat) {
  Parked p;
  ASSERT_EQ(Threads(p.pid()), 4);
  Result<agent::CapturedStack> st = agent::CaptureStacksWith(StackTool::kLibdw, p.pid(), kBudget);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->tool, "libdw");
  EXPECT_EQ(st->text.rfind("PID " + std::to_string(p.pid()) + " - process\nTID " + std::to_string(p.pid()) + ":\n#0  0x", 0),
            0u)
      << st->text;
  const std::vector<pid_t> tids = Tids(st->text);
  ASSERT_EQ(tids.size(), 4u) << st->text;
  EXPECT_EQ(tids[0], p.pid());
  EXPECT_NE(st->text.find("ParkedWorker()"), std::string::npos) << st->text;  // demangled
  // The analyzer reads it as it reads eu-stack's: the main thread's frames,
  // named, down to the test's own function.
  const std::vector<std::string> frames = controller::NormalizeMainThread(st->text);
  ASSERT_FALSE(frames.empty()) << st->text;
  EXPECT_TRUE(std::any_of(frames.begin(), frames.end(),
                          [](const std::string& f) { return f.find("ParkedMain") != std::string::npos; }))
      << st->text;
  EXPECT_EQ(std::count(frames.begin(), frames.end(), "ParkedWorker"), 0) << "only the main thread is its signature";
}

TEST(Libdw, GroupsExactlyAsEuStackDoesAndItsTimeIsPrinted) {
  Parked p;
  std::vector<double> libdw_ms, eu_ms;
  std::vector<std::string> libdw_sig, eu_sig;
  for (int i = 0; i < 5; ++i) {
    Result<agent::CapturedStack> a = agent::CaptureStacksWith(StackTool::kLibdw, p.pid(), kBudget);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    Result<agent::CapturedStack> b = agent::CaptureStacksWith(StackTool::kEuStack, p.pid(), kBudget);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    libdw_ms.push_back(a->ms);
    eu_ms.push_back(b->ms);
    libdw_sig = controller::NormalizeMainThread(a->text);
    eu_sig = controller::NormalizeMainThread(b->text);
    ASSERT_EQ(libdw_sig, eu_sig) << "libdw:\n" << a->text << "\neu-stack:\n" << b->text;
    EXPECT_EQ(Tids(a->text).size(), Tids(b->text).size());
  }
  std::sort(libdw_ms.begin(), libdw_ms.end());
  std::sort(eu_ms.begin(), eu_ms.end());
  std::printf("[ timing ] 4-thread process, median of 5: libdw %.1f ms (min %.1f), eu-stack %.1f ms (min %.1f)\n",
              libdw_ms[2], libdw_ms[0], eu_ms[2], eu_ms[0]);
}

TEST(Libdw, TheProcessRunsOnAfterTheCapture) {
  Parked p;
  ASSERT_TRUE(agent::CaptureStacksWith(StackTool::kLibdw, p.pid(), kBudget).ok());
  // Detached and not left stopped: back in pause(), state S (a tracee left
  // behind would read 't' or 'T').
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  char state = agent::ProcessState(p.pid());
  while (state != 'S' && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    state = agent::ProcessState(p.pid());
  }
  EXPECT_EQ(state, 'S');
  // And it can be captured again (no tracer still attached).
  EXPECT_TRUE(agent::CaptureStacksWith(StackTool::kLibdw, p.pid(), kBudget).ok());
}

TEST(Libdw, AProcessThatIsGoneIsAClearError) {
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  Result<agent::CapturedStack> st = agent::CaptureStacksWith(StackTool::kLibdw, child, kBudget);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("process " + std::to_string(child)), std::string::npos)
      << st.status().message();
  // The chain names every tool it tried.
  Result<agent::CapturedStack> any = agent::CaptureStacks(child, kBudget);
  ASSERT_FALSE(any.ok());
  EXPECT_NE(any.status().message().find("libdw: "), std::string::npos) << any.status().message();
  EXPECT_NE(any.status().message().find("eu-stack: "), std::string::npos) << any.status().message();
}

}  // namespace
}  // namespace bulwark
