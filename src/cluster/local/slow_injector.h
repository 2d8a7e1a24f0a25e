// SlowInjector: emulates a fail-slow machine (a throttled GPU, a bad DIMM):
// the processes that compute on it get 1/F of their running time, by
// SIGSTOP/SIGCONT duty cycling in 100 ms periods. Only the cause is
// emulated; the ranks simply run slower, and the detector has to notice
// from their step reports.
//
// Part of the local backend's emulation (cluster/local/emulator.h), which
// runs it in the controller's process and names the processes; the agent
// takes no part. Its stops are short, so the agent's stuck-rank check
// (agent/inspector.h: StuckRanks) sees ranks that keep running and stays on.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

namespace bulwark::cluster {

class SlowInjector {
 public:
  // `targets` names the processes to slow; it is asked again every few
  // periods, so ranks a restart started are slowed too.
  explicit SlowInjector(std::function<std::set<pid_t>()> targets) : targets_(std::move(targets)) {}
  ~SlowInjector() { Stop(); }
  // Starts (or changes) the slowdown; factor > 1.
  void Start(double factor);
  // Ends it and resumes every process it stopped.
  void Stop();
  bool active() const { return running_; }

 private:
  void Loop();
  const std::function<std::set<pid_t>()> targets_;
  std::atomic<bool> running_{false};
  std::atomic<double> factor_{1};
  std::thread thread_;
};

}  // namespace bulwark::cluster
