// The agent's clock, taken from outside.
//
// The agent's timing rules (the peer-lost grace, the controller counted
// unreachable, the report and inspection periods) read time only through
// this interface: production passes the wall clock, tests a ManualClock
// that moves when told, so the rules are tested without sleeping
// (agent_test: AgentTiming). Only the agent's own loop reads it; the
// processes it starts and the libraries it calls keep their own clocks.
#pragma once

#include <chrono>
#include <memory>

#include "common/mutex.h"

namespace bulwark::agent {

class AgentClock {
 public:
  using time_point = std::chrono::system_clock::time_point;
  using duration = std::chrono::system_clock::duration;
  virtual ~AgentClock() = default;
  virtual time_point Now() const = 0;
};

// The wall clock (system_clock: the agent's times go into events as
// milliseconds since the epoch).
class WallClock final : public AgentClock {
 public:
  time_point Now() const override { return std::chrono::system_clock::now(); }
};

// A clock for tests: stands still until Advance. Thread-safe, as the
// agent's command thread may read it.
class ManualClock final : public AgentClock {
 public:
  explicit ManualClock(time_point start) : now_(start) {}
  time_point Now() const override {
    MutexLock lock(&mu_);
    return now_;
  }
  void Advance(duration d) {
    MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  mutable Mutex mu_;
  time_point now_ GUARDED_BY(mu_);
};

}  // namespace bulwark::agent
