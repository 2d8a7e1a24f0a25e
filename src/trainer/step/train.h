// The training run: setup, the step loop, checkpoints, the done line.
#pragma once

#include "common/status.h"
#include "trainer/config.h"

namespace bulwark::trainer {

// Runs training as configured; returns how it ended. Prints progress and the
// final done line itself.
Status Train(const TrainConfig& cfg);

}  // namespace bulwark::trainer
