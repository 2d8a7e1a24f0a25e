#include "controller/echo.h"

namespace bulwark::controller {

const char* ExitVerdictName(ExitVerdict v) {
  switch (v) {
    case ExitVerdict::kNew: return "new";
    case ExitVerdict::kEcho: return "echo";
    case ExitVerdict::kHold: return "hold";
  }
  return "?";
}

ExitVerdict ClassifyExit(const ExitFacts& exit, const EpisodeFacts& episode, Time now, Duration peer_lost_grace) {
  if (exit.generation != 0 && exit.generation != episode.generation) {
    return ExitVerdict::kEcho;
  }
  if (episode.last_restart_at && exit.observed <= *episode.last_restart_at) return ExitVerdict::kEcho;
  if (exit.peer_lost && now < exit.observed + peer_lost_grace) return ExitVerdict::kHold;
  return ExitVerdict::kNew;
}

}  // namespace bulwark::controller
