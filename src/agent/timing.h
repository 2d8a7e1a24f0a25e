// The agent's timing rules: its periods and graces, and the one judgement
// made from them that is not the echo rule's (controller/echo.h): whether
// the controller counts as reachable. Pure: times come in (agent/clock.h).
#pragma once

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

}  // namespace bulwark::agent
