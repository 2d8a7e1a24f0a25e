// RankSignal: what a rank says about its training steps, through its agent.
//
// Each bulwark-train rank reports every step to its agent over the rank link
// (client/rank_link.h); the agent sums a run of ordinary steps into one
// signal per heartbeat and forwards any anomalous step on its own. These are
// observations for the detectors, not policy events: they are not
// journaled, and a restarted controller learns the step time again.
#pragma once

#include <cstdint>
#include <string>

#include "common/step_signal.h"
#include "controller/machine.h"
#include "controller/time.h"

namespace bulwark::controller {

// The rank's figures (common/step_signal.h: one field list from the rank to
// here), whose rank and when.
struct RankSignal : StepFigures {
  MachineId machine;
  int rank = 0;
  Time observed{};
};

// A rank announces a phase that is not a training step (evaluation, a disk
// checkpoint) and how long it expects it to take.
struct RankPhase {
  MachineId machine;
  int rank = 0;
  std::string what;
  Duration expected{0};
  Time observed{};
  int64_t after_step = 0;  // the step it follows: stale once a later step is seen
};

}  // namespace bulwark::controller
