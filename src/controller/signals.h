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

#include "controller/machine.h"
#include "controller/time.h"

namespace bulwark::controller {

struct RankSignal {
  MachineId machine;
  int rank = 0;
  int64_t step = 0;  // the newest step in the run
  int steps = 1;     // steps summed in the *_ms fields
  double loss = 0, grad_norm = 0;
  double local_grad_norm = 0;  // this rank's gradients before the all-reduce
  double step_ms = 0, compute_ms = 0, comm_ms = 0;
  bool local_nonfinite = false;  // a non-finite value in this rank's own loss or gradients
  bool nonfinite = false;        // the global loss or grad norm was non-finite
  // The rank held the step back (did not apply the update) and waits for a
  // decision: "nan" or "spike". Empty: the step was applied.
  std::string halted;
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
