// The agent's timing rules: its periods and graces, and the one judgement
// made from them that is not the echo rule's (controller/echo.h): whether
// the controller counts as reachable. Pure: times come in (agent/clock.h).
#pragma once

#include <algorithm>
#include <chrono>

namespace bulwark::agent {

constexpr auto kLoopPeriod = std::chrono::milliseconds(100);
// A rank that exits with kExitPeerLost says a *peer* failed. Its report waits
// this long for the culprit's own report to reach the controller and the
// restart to come back; if the restart comes first the exit is the fault's
// echo and is dropped, so the incident names the culprit, not a survivor.
// It outlasts the controller's heartbeat timeout (2 s) plus a report period
// and its tick, so that a dead peer machine is found by its silence before a
// survivor is blamed.
constexpr auto kPeerLostGrace = std::chrono::milliseconds(4000);
constexpr auto kReportPeriod = std::chrono::milliseconds(500);
constexpr auto kCallDeadline = std::chrono::milliseconds(1500);

// Reachable: a report went through within the last report period and a
// failed call's deadline. While it is not, the peer-lost grace stands still
// (echo_hold.h): only a reachable controller can send the restart that
// makes a held exit an echo.
template <typename TimePoint>
bool ControllerReachable(TimePoint now, TimePoint last_report_ok) {
  return now - last_report_ok <= kReportPeriod + kCallDeadline;
}

// Fenced: fencing is on and no report has gone through for the fence
// timeout, counted from when the last one that did was *sent*. The
// controller heard that report no earlier than it was sent, so a machine
// whose heartbeat timeout (longer than the fence timeout) ran out has
// fenced itself by then.
template <typename TimePoint, typename Duration>
bool FenceDue(TimePoint now, TimePoint last_ok_sent, Duration fence_timeout) {
  return fence_timeout > Duration::zero() && now - last_ok_sent > fence_timeout;
}

// With fencing the controller's heartbeat timeout grows past the fence
// timeout (plane: FenceLease), and a survivor's peer-lost exit must still
// wait for the culprit's silence to be found first.
template <typename Duration>
std::chrono::milliseconds PeerLostGrace(Duration fence_timeout) {
  const auto lease = std::chrono::duration_cast<std::chrono::milliseconds>(fence_timeout) + std::chrono::seconds(1);
  return std::max<std::chrono::milliseconds>(kPeerLostGrace, lease + std::chrono::seconds(2));
}

}  // namespace bulwark::agent
