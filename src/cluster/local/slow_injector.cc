#include "cluster/local/slow_injector.h"

#include <signal.h>

#include <chrono>

namespace bulwark::cluster {

void SlowInjector::Start(double factor) {
  factor_ = factor;
  if (running_.exchange(true)) return;
  thread_ = std::thread([this] { Loop(); });
}

void SlowInjector::Stop() {
  if (!running_.exchange(false)) return;
  thread_.join();
}

void SlowInjector::Loop() {
  using std::chrono::microseconds;
  constexpr int64_t kPeriodUs = 100000;
  // Naming the processes reads /proc: every 5th period, not every one.
  constexpr int kRefreshPeriods = 5;
  std::set<pid_t> pids;
  auto signal_all = [&](int sig) {
    for (pid_t p : pids) ::kill(p, sig);
  };
  for (int period = 0; running_; ++period) {
    if (period % kRefreshPeriods == 0) {
      std::set<pid_t> now = targets_();
      // A process that left the set (a rank that ended) must not stay stopped.
      for (pid_t p : pids) {
        if (!now.count(p)) ::kill(p, SIGCONT);
      }
      pids = std::move(now);
    }
    const int64_t run = static_cast<int64_t>(kPeriodUs / factor_.load());
    signal_all(SIGCONT);
    std::this_thread::sleep_for(microseconds(run));
    signal_all(SIGSTOP);
    std::this_thread::sleep_for(microseconds(kPeriodUs - run));
  }
  signal_all(SIGCONT);
}

}  // namespace bulwark::cluster
