#include "plane/kill_point.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace bulwark::controller {
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
}

void KillPointSent(const std::string& command_kind, const std::string& machine, int64_t generation) {
  if (Target().empty()) return;
  const std::string point = "sent:" + command_kind + ":" + machine;
  if (Target() == point || Target() == point + ":g" + std::to_string(generation)) Die(point);
}

}  // namespace bulwark::controller
