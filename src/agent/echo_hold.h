// EchoHold: peer-lost exits held back for a grace period.
//
// A rank that exits with the peer-lost code says a *peer* failed; its report
// waits so the culprit's own report, and the restart it causes, come first
// (then the exit is the fault's echo and is dropped). A restart can only
// come from a reachable controller: while the controller is down or
// restarting the grace stands still, or every survivor of a fault that hit
// during a controller restart would be reported as a crash of its own, and
// a healthy machine evicted for "crashing twice". Pure: fed times.
#pragma once

#include <chrono>
#include <deque>
#include <utility>
#include <vector>

namespace bulwark::agent {

template <typename Event, typename Clock = std::chrono::steady_clock>
class EchoHold {
 public:
  explicit EchoHold(typename Clock::duration grace) : grace_(grace) {}

  void Hold(Event e, typename Clock::time_point at) { held_.push_back({at + grace_, std::move(e)}); }
  // The restart came: the held exits were its echoes.
  size_t DropAll() {
    const size_t n = held_.size();
    held_.clear();
    return n;
  }
  bool empty() const { return held_.empty(); }

  // The exits whose grace ran out by `now`. Time since the previous call
  // does not count while the controller was unreachable.
  std::vector<Event> Due(typename Clock::time_point now, bool controller_reachable) {
    if (!controller_reachable && last_ != typename Clock::time_point{}) {
      for (auto& h : held_) h.first += now - last_;
    }
    last_ = now;
    std::vector<Event> out;
    while (!held_.empty() && held_.front().first <= now) {
      out.push_back(std::move(held_.front().second));
      held_.pop_front();
    }
    return out;
  }

 private:
  typename Clock::duration grace_;
  typename Clock::time_point last_{};
  std::deque<std::pair<typename Clock::time_point, Event>> held_;
};

}  // namespace bulwark::agent
