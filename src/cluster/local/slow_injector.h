// SlowInjector: emulates a fail-slow machine (a throttled GPU, a bad DIMM):
// its ranks get 1/F of their running time, by SIGSTOP/SIGCONT duty cycling
// in 100 ms periods. Only the cause is emulated; the ranks simply run
// slower, and the detector has to notice from their step reports.
//
// Part of the local backend's emulated hardware (emulated_hardware.h): the
// agent starts it at `inject slow` and hands it the machine's processes,
// but nothing the agent checks reads it. Its stops are short, so the
// agent's stuck-rank check (agent/inspector.h: StuckRanks) sees ranks that
// keep running and stays on.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>

namespace bulwark::cluster {

class SlowInjector {
 public:
  ~SlowInjector() { Stop(); }
  // Starts (or changes) the slowdown; factor > 1.
  void Start(double factor);
  // Ends it and resumes every process it stopped.
  void Stop();
  // The machine's current rank processes (the supervisor's, refreshed by the agent).
  void SetPids(std::set<pid_t> pids);
  bool active() const { return running_; }

 private:
  void Loop();
  std::atomic<bool> running_{false};
  std::atomic<double> factor_{1};
  std::thread thread_;
  std::mutex mu_;
  std::set<pid_t> pids_;
};

}  // namespace bulwark::cluster
