// Elastic data parallelism over pipelines (--elastic-replicas N --pp S):
// a replica is a whole pipeline, S ranks that hold one stage each. The
// replicas that are left keep training when one is lost, and a replica that
// comes back takes each stage's state from that stage's live ranks.
//
// The rules are elastic.h's, per stage. The global batch is N x M
// micro-batches (M = --micro-batches); D <= N replicas split them round
// robin, each running its share through its pipeline in 1F1B order. Each
// stage keeps every micro-batch's gradient apart and the stage's replicas
// sum them exactly (ExactMeanOfMicroBatches), so a stage's gradient is the
// same bits at any D. The global gradient norm and the loss add one slot
// per stage, in stage order.
//
// A process keeps its stage from one generation to the next (the controller
// moves whole replicas, and rank = stage x D + replica keeps a survivor's
// stage when replicas leave). Each stage's replicas sync their live state
// among themselves (SyncLiveState over the stage's group); a replica with
// any stage that took a peer's state computes none of the generation's
// first step. When the stages' newest live steps differ (a fault inside
// the step's last all-reduce), no live state is trusted and the generation
// restores from the in-memory checkpoint, as a whole-world restart would.
#pragma once

#include <memory>
#include <vector>

#include "common/status.h"
#include "trainer/comm/dist.h"
#include "trainer/step/elastic.h"
#include "trainer/state/memory_checkpoint.h"
#include "trainer/step/pipeline.h"
#include "trainer/step/pipeline_plan.h"
#include "trainer/step/step_driver.h"
#include "trainer/step/train_loop.h"

namespace bulwark::trainer {

// Collective over `world`: SyncLiveState per stage (see the top of this
// file). Its `healing` names the replicas (not the ranks) that compute
// none of the first step.
Result<LiveSync> SyncPipelineLiveState(Comm& world, PipelinePlace& place, TrainProcess& p, MemoryCheckpoint* mem,
                                       TrainState* st);

// The elastic pipeline's step (a StepLayout for the step driver).
std::unique_ptr<StepLayout> MakeElasticPipelineStep(TrainProcess& p, Comm& world, PipelinePlace& place,
                                                    const std::vector<int>& healing);

}  // namespace bulwark::trainer
