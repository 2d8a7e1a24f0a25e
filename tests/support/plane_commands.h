// The command a Plane wants a machine to carry out, read the way an agent's
// command stream reads it. Shared by the plane's unit tests.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "plane/plane.h"

namespace bulwark::testing {

// The START_RANKS (or STOP_RANKS) command `machine` should be carrying out.
inline wire::Command Desired(plane::Plane& p, const std::string& machine, int64_t at_ms) {
  const int64_t stream = p.OpenStream(machine);
  std::string sent;
  bool superseded = false;
  std::optional<wire::Command> c = p.NextCommand(machine, stream, &sent, controller::TimeFromMs(at_ms), &superseded);
  EXPECT_TRUE(c.has_value()) << machine << " has no command";
  return c.value_or(wire::Command{});
}

// A two-rank job running /bin/true: the plane tests' launch.
inline plane::JobLaunch Launch() {
  plane::JobLaunch l;
  l.spec.id = "demo";
  l.spec.world_size = 2;
  l.argv = {"/bin/true"};
  return l;
}

}  // namespace bulwark::testing
