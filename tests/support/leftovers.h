// What a test started dies with the test, however the test ends.
//
// When ctest kills a test at its timeout it kills the test's process tree,
// but `bulwark up` daemonizes the controller and the agents (double fork,
// setsid): they are no longer in that tree nor in the test's process group,
// and they trained on for the rest of the suite (6 agents and 3 ranks alive
// 30 min after a fleet case timed out). So every process a test starts
// carries a tag in its environment, which what it starts inherits (the
// agents pass it to their ranks), and a watcher outside the test's tree
// kills whatever still carries the tag once the test's process is gone.
#pragma once

#include <string>

namespace bulwark::testing {

// The environment variable that carries the tag.
inline constexpr const char kOwnerVariable[] = "BULWARK_TEST_OWNER";

// This test process's tag ("pid.nanoseconds"). The first call starts the
// watcher; Process calls it before every child it starts.
const std::string& LeftoversTag();

}  // namespace bulwark::testing
