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

void SlowInjector::SetPids(std::set<pid_t> pids) {
  std::lock_guard<std::mutex> lock(mu_);
  pids_ = std::move(pids);
}

void SlowInjector::Loop() {
  using std::chrono::microseconds;
  constexpr int64_t kPeriodUs = 100000;
  auto signal_all = [&](int sig) {
    std::lock_guard<std::mutex> lock(mu_);
    for (pid_t p : pids_) ::kill(p, sig);
  };
  while (running_) {
    const int64_t run = static_cast<int64_t>(kPeriodUs / factor_.load());
    signal_all(SIGCONT);
    std::this_thread::sleep_for(microseconds(run));
    signal_all(SIGSTOP);
    std::this_thread::sleep_for(microseconds(kPeriodUs - run));
  }
  signal_all(SIGCONT);
}

}  // namespace bulwark::cluster
