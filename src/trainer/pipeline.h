// Pipeline-parallel training (--pp N, --micro-batches M): DP x PP ranks.
//
// Each rank builds the whole model from the seed (so every stage's share is
// bitwise what a single-stage run would hold) and trains only its stage's
// parameters (pipeline_plan.h: split, rank layout, 1F1B order). Per step:
//   each data-parallel replica cuts its batch into M micro-batches; stages
//   run them in 1F1B order, passing the fp32 residual stream forward and its
//   gradient backward with Gloo send/recv between neighbouring stages;
//   -> gradient all-reduce within the stage's DP group (the loss rides along
//   on the last stage) -> one world all-reduce of the squared gradient norm
//   and the loss -> clip -> AdamW (ZeRO-1 within the DP group) -> checkpoint.
// A peer that dies or hangs fails a send, a receive or a collective, and the
// rank ends with the peer-lost exit code like a data-parallel run.
//
// The step driver (step_driver.h) runs the loop, as for data parallel: a
// step whose loss or gradient norm is non-finite or spikes is held back
// (not applied, not checkpointed), and the rank waits to be stopped.
//
// Not here: POET (refused with --pp > 1) and restarts that keep the process
// (a pipeline rank is restarted as a new process).
#pragma once

#include "common/status.h"
#include "trainer/config.h"

namespace bulwark::trainer {

// True when the run needs this loop rather than Train()'s data-parallel one.
// An elastic job's --micro-batches cut its replicas' batches (elastic.h).
inline bool UsesPipeline(const TrainConfig& cfg) {
  return cfg.pp > 1 || (cfg.micro_batches > 1 && cfg.elastic_replicas == 0);
}

Status TrainPipeline(const TrainConfig& cfg);

}  // namespace bulwark::trainer
