// EchoHold: peer-lost exits held back for a grace period.
//
// A rank that exits with the peer-lost code says a *peer* failed; its report
// waits so the culprit's own report, and the restart it causes, come first
// (then the exit is the fault's echo and is dropped). A restart can only
// come from a reachable controller: while the controller is down or
// restarting the grace stands still, or every survivor of a fault that hit
// during a controller restart would be reported as a crash of its own, and
// a healthy machine evicted for "crashing twice". Pure: fed times. Whether a
// held exit is held, an echo or news is the one rule of controller/echo.h.
#pragma once

#include <chrono>
#include <deque>
#include <utility>
#include <vector>

#include "controller/echo.h"

namespace bulwark::agent {

template <typename Event, typename Clock = std::chrono::steady_clock>
class EchoHold {
 public:
  explicit EchoHold(typename Clock::duration grace) : grace_(grace) {}

  void Hold(Event e, typename Clock::time_point at) { held_.push_back({at, at, std::move(e)}); }
  // A restart came at `at`: the held exits it answers (every one at or
  // before it) are its echoes and are dropped. Returns how many.
  size_t DropEchoes(typename Clock::time_point at) {
    const size_t before = held_.size();
    for (auto it = held_.begin(); it != held_.end();) {
      const controller::EpisodeFacts restarted{0, At(at)};
      if (controller::ClassifyExit(Facts(*it, /*grace_start=*/false), restarted, At(at), Grace()) ==
          controller::ExitVerdict::kEcho) {
        it = held_.erase(it);
      } else {
        ++it;
      }
    }
    return before - held_.size();
  }
  bool empty() const { return held_.empty(); }

  // The exits whose grace ran out by `now`. Time since the previous call
  // does not count while the controller was unreachable.
  std::vector<Event> Due(typename Clock::time_point now, bool controller_reachable) {
    if (!controller_reachable && last_ != typename Clock::time_point{}) {
      for (Held& h : held_) h.grace_start += now - last_;
    }
    last_ = now;
    std::vector<Event> out;
    while (!held_.empty() && controller::ClassifyExit(Facts(held_.front(), /*grace_start=*/true), {}, At(now),
                                                      Grace()) == controller::ExitVerdict::kNew) {
      out.push_back(std::move(held_.front().event));
      held_.pop_front();
    }
    return out;
  }

 private:
  struct Held {
    typename Clock::time_point observed;     // when the rank exited
    typename Clock::time_point grace_start;  // moved on by the time the controller was unreachable
    Event event;
  };
  static controller::Time At(typename Clock::time_point t) {
    return controller::TimeFromMs(std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count());
  }
  controller::Duration Grace() const { return std::chrono::duration_cast<controller::Duration>(grace_); }
  // The agent does not compare generations here: a restart drops all it holds.
  static controller::ExitFacts Facts(const Held& h, bool grace_start) {
    return {0, At(grace_start ? h.grace_start : h.observed), /*peer_lost=*/true};
  }

  typename Clock::duration grace_;
  typename Clock::time_point last_{};
  std::deque<Held> held_;
};

}  // namespace bulwark::agent
