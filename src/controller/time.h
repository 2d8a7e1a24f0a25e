// Virtual time for the controller's policy.
//
// The policy never reads a clock: every entry point takes `now`, and every
// event carries the time it was observed. The controller's server passes the
// real time in; the scale simulator and the tests pass a virtual one. That is
// what makes the policy deterministic, replayable and free of sleeps.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace bulwark::controller {

// A clock type with no now(): time points of it can only be made from
// numbers, so nothing in the policy can read the wall clock by accident.
struct VirtualClock {
  using rep = int64_t;
  using period = std::milli;
  using duration = std::chrono::milliseconds;
  using time_point = std::chrono::time_point<VirtualClock>;
  static constexpr bool is_steady = true;
};

using Duration = std::chrono::milliseconds;
using Time = VirtualClock::time_point;

constexpr Time TimeFromMs(int64_t ms) { return Time(Duration(ms)); }
constexpr int64_t ToMs(Time t) { return t.time_since_epoch().count(); }
constexpr int64_t ToMs(Duration d) { return d.count(); }

// "t+12.345s": for messages and incident causes.
std::string FormatTime(Time t);
// "10min", "30s" or "12.345s".
std::string FormatDuration(Duration d);

}  // namespace bulwark::controller
