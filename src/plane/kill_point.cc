#include "plane/kill_point.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>

namespace bulwark::plane {
namespace {

const std::string& Target() {
  static const std::string target = [] {
    const char* v = std::getenv("BULWARK_TEST_KILL_AT");
    return std::string(v == nullptr ? "" : v);
  }();
  return target;
}

void Die(const std::string& point) {
  std::fprintf(stderr, "kill point %s reached: SIGKILL (BULWARK_TEST_KILL_AT)\n", point.c_str());
  std::fflush(stderr);
  ::kill(::getpid(), SIGKILL);
}

}  // namespace

void KillPointJournaled(const std::string& event_kind) {
  if (Target().empty()) return;
  const std::string point = "journaled:" + event_kind;
  if (Target() == point) Die(point);
  // "journaled:<kind>#N": the Nth such event this process journals. Called
  // under the plane's lock, so the count needs none of its own.
  static std::map<std::string, int> seen;
  if (Target().rfind(point + "#", 0) == 0 && ++seen[point] == std::atoi(Target().c_str() + point.size() + 1)) {
    Die(Target());
  }
}

void KillPointSent(const std::string& command_kind, const std::string& machine, int64_t generation) {
  if (Target().empty()) return;
  const std::string point = "sent:" + command_kind + ":" + machine;
  if (Target() == point || Target() == point + ":g" + std::to_string(generation)) Die(point);
}

}  // namespace bulwark::plane
