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
// Train() runs it as it runs every layout (train.h): this file places a
// rank in the pipeline and builds the 1F1B step for the step driver
// (step_driver.h). A step whose loss or gradient norm is non-finite or
// spikes is held back (not applied, not checkpointed), and the rank waits
// to be stopped: a fixed pipeline's rank restarts as a new process. An
// elastic pipeline's generations run in place (elastic_pipeline.h).
//
// Not here: POET (refused with --pp > 1).
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "trainer/config.h"
#include "trainer/comm/dist.h"
#include "trainer/step/pipeline_plan.h"
#include "trainer/step/step_driver.h"
#include "trainer/step/train_loop.h"

namespace bulwark::trainer {

// True when the run takes the pipeline's step rather than data parallel's.
// An elastic job's --micro-batches cut its replicas' batches (elastic.h).
inline bool UsesPipeline(const TrainConfig& cfg) {
  return cfg.pp > 1 || (cfg.micro_batches > 1 && cfg.elastic_replicas == 0);
}

// Where a rank sits in a pipeline job: its coordinates, its stage's
// layers, and the group of its stage's data-parallel replicas.
struct PipelinePlace {
  PipelineCoords c;
  StageLayers layers;
  std::unique_ptr<Comm> dp;  // this stage's replicas
};

// Collective over `world`. The coordinates of this rank, its stage's group,
// and its stage's parameters in `p.store` (built by the first generation:
// padded to the replicas' count for a fixed pipeline, unpadded for an
// elastic one, which splits it unevenly, dist.h's ChunkOf). A process asked
// to take another stage than it holds ends (kUnavailable, p.must_exit): its
// state is no use there.
Result<PipelinePlace> PlaceInPipeline(TrainProcess& p, Comm& world);

// What the start event adds for a pipeline (dp, pp, micro_batches, split,
// bubble_fraction, stage_params), and the one line that describes it.
nlohmann::json PipelineStart(const TrainConfig& cfg, const PipelinePlace& place, const ParamStore& store);
std::string DescribePipeline(const TrainConfig& cfg, const PipelinePlace& place);

// The fixed pipeline's 1F1B step (a StepLayout for the step driver).
std::unique_ptr<StepLayout> MakePipelineStep(TrainProcess& p, Comm& world, PipelinePlace& place);

}  // namespace bulwark::trainer
