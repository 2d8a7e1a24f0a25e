// The one echo rule (controller/echo.h), as a table: each row is the facts
// one of its three callers has, and the verdict.
#include <gtest/gtest.h>

#include "controller/echo.h"

namespace bulwark::controller {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr Time T(int64_t s) { return TimeFromMs(s * 1000); }

struct Row {
  const char* why;
  ExitFacts exit;
  EpisodeFacts episode;
  Time now;
  Duration grace;
  ExitVerdict want;
};

TEST(Echo, ClassifiesEveryCallersFacts) {
  const Duration kGrace = seconds(4);
  const Row rows[] = {
      // The plane: the generation each exit came from.
      {"an exit of the running generation is news", {3, T(10), false}, {3, {}}, T(10), Duration(0), ExitVerdict::kNew},
      {"an exit of an older generation is the restart's echo", {2, T(10), false}, {3, {}}, T(10), Duration(0),
       ExitVerdict::kEcho},
      {"an agent that does not say its generation is never an echo by it", {0, T(10), false}, {3, {}}, T(10),
       Duration(0), ExitVerdict::kNew},
      // The policy: when it last restarted.
      {"an exit at the restart is its victim", {0, T(10), false}, {0, T(10)}, T(11), Duration(0), ExitVerdict::kEcho},
      {"an exit before the restart is part of its episode", {0, T(9), false}, {0, T(10)}, T(11), Duration(0),
       ExitVerdict::kEcho},
      {"an exit after the restart is a new crash", {0, T(11), false}, {0, T(10)}, T(11), Duration(0),
       ExitVerdict::kNew},
      // The agent: a peer-lost exit waits out its grace.
      {"a peer-lost exit inside its grace is held", {0, T(10), true}, {0, {}}, T(13), kGrace, ExitVerdict::kHold},
      {"a peer-lost exit whose grace ran out is reported", {0, T(10), true}, {0, {}}, T(14), kGrace,
       ExitVerdict::kNew},
      {"a peer-lost exit answered by a restart is an echo", {0, T(10), true}, {0, T(12)}, T(12), kGrace,
       ExitVerdict::kEcho},
      {"an ordinary exit is never held", {0, T(10), false}, {0, {}}, T(10), kGrace, ExitVerdict::kNew},
      {"with no grace a peer-lost exit is news at once", {0, T(10), true}, {0, {}}, T(10), Duration(0),
       ExitVerdict::kNew},
  };
  for (const Row& r : rows) {
    EXPECT_EQ(ExitVerdictName(ClassifyExit(r.exit, r.episode, r.now, r.grace)), std::string(ExitVerdictName(r.want)))
        << r.why;
  }
}

}  // namespace
}  // namespace bulwark::controller
