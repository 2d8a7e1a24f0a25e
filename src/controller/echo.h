// Echoes: is a rank's exit a fault of its own, or part of one already handled?
//
// One fault makes many exits. The culprit dies; its peers' collectives fail
// within moments (connection reset, NCCL error, the peer-lost exit code);
// the restart the controller makes stops the rest. Only the first is news:
// the others are the fault's echo, and counting them as crashes of their
// own would blame survivors (and evict a healthy machine for "crashing
// twice"). Three places see exits: the agent (which holds a peer-lost exit
// back for the culprit's report), the plane (which knows the generation each
// exit came from) and the policy (which knows when it last restarted). Each
// knows different facts; this one pure function decides with whatever facts
// its caller has, so the rule is written once.
#pragma once

#include <cstdint>
#include <optional>

#include "controller/time.h"

namespace bulwark::controller {

// What is known of one exit.
struct ExitFacts {
  int64_t generation = 0;  // the placement generation the rank ran in; 0: not said
  Time observed{};         // when the rank exited (or, held, when its grace started)
  bool peer_lost = false;  // its exit code says a *peer* failed (common/exit_codes.h)
};

// What is known of the episode the exit may belong to. A caller that does
// not know the generations leaves the exit's at 0; one that made no restart
// leaves last_restart_at empty: a fact left out never makes an exit an echo.
struct EpisodeFacts {
  int64_t generation = 0;               // the generation running now
  std::optional<Time> last_restart_at;  // the latest restart, when there was one
};

enum class ExitVerdict {
  kNew,   // a fault of its own: report it, decide on it
  kEcho,  // part of an episode already answered: drop it
  kHold,  // a peer-lost exit inside its grace: wait for the culprit's report or the restart
};
const char* ExitVerdictName(ExitVerdict v);

// The rule, in order:
//   ran in another generation than the one running (the exit's known): the
//       restart to the running one answers it -> kEcho;
//   exited at or before the latest restart: that restart's own victim, or
//       the echo of the fault it answered -> kEcho;
//   a peer-lost exit whose grace has not run out by `now` -> kHold;
//   otherwise -> kNew.
// Pure: no clock, `now` comes in. A grace of zero never holds.
ExitVerdict ClassifyExit(const ExitFacts& exit, const EpisodeFacts& episode, Time now, Duration peer_lost_grace);

}  // namespace bulwark::controller
