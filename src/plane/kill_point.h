// Kill points: test-only crash sites in the controller process.
//
// A controller must survive being killed at any moment that matters:
// between journaling an event and acting on it, after some agents got a
// restart and others not, mid-eviction, during a standby swap. A test that
// kills it "after about a second" finds those moments only by luck. With
// BULWARK_TEST_KILL_AT set, the controller SIGKILLs itself the first time it
// passes the named point, so each moment is hit every time:
//
//   journaled:<event kind>                 an event of that kind was
//                                          journaled; its actions not yet
//                                          carried out ("rank_exited")
//   journaled:<event kind>#N               the Nth one ("training_anomaly#2":
//                                          the NaN that starts the ladder)
//   sent:<COMMAND>:<machine>[:g<gen>]      a command of that kind (and
//                                          generation) was written to the
//                                          machine's stream ("sent:STOP_RANKS:m02")
//
// Unset (production): each check is one comparison against an empty string.
#pragma once

#include <cstdint>
#include <string>

#include "plane/core.h"

namespace bulwark::plane {

void KillPointJournaled(const std::string& event_kind);
void KillPointSent(const std::string& command_kind, const std::string& machine, int64_t generation);

}  // namespace bulwark::plane
