// ExitWatcher: wakes the agent's loop the moment one of its ranks ends.
//
// The loop reaps its ranks once a period (kLoopPeriod, 100 ms) unless a
// command wakes it, so a killed rank's exit reached the controller up to a
// period late, and every survivor of an elastic job stood still for that
// time: the controller's decision waits for the culprit's report. A thread
// here polls a pidfd per rank (Linux 5.3+) and calls `wake` when one turns
// readable. It only wakes: reaping and reporting stay the loop's. Where
// pidfd_open is refused, nothing is watched and the period stands.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <set>
#include <thread>

#include "common/mutex.h"

namespace bulwark::agent {

class ExitWatcher {
 public:
  explicit ExitWatcher(std::function<void()> wake);
  ~ExitWatcher();
  ExitWatcher(const ExitWatcher&) = delete;
  ExitWatcher& operator=(const ExitWatcher&) = delete;

  // The processes to watch from now on, replacing the last set. A process
  // already seen to end is not watched again (its zombie stays readable
  // until the loop reaps it).
  void Watch(const std::set<pid_t>& pids);
  // False where this kernel has no pidfds.
  bool active() const { return event_fd_ >= 0; }

 private:
  void Run();

  std::function<void()> wake_;
  int event_fd_ = -1;  // Watch and the destructor poke the thread through it
  Mutex mu_;
  std::set<pid_t> wanted_ GUARDED_BY(mu_);
  std::set<pid_t> ended_ GUARDED_BY(mu_);  // seen ending, still in wanted_
  bool stop_ GUARDED_BY(mu_) = false;
  std::map<pid_t, int> fds_;  // the thread's own: pid -> pidfd
  std::thread thread_;
};

}  // namespace bulwark::agent
