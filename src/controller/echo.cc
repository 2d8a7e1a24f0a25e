#include "controller/echo.h"

#include <iterator>

namespace bulwark::controller {

const char* ExitVerdictName(ExitVerdict v) {
  static constexpr const char* kNames[] = {"new", "echo", "hold"};  // in ExitVerdict's order
  const auto i = static_cast<size_t>(v);
  return i < std::size(kNames) ? kNames[i] : "?";
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
