// What a training checkpoint holds and how a rank saves and restores it.
//
// Per writer (rank 0 alone, or every rank under --shard-optimizer):
//   meta   JSON: step, world size, rank, model shape, optimizer, seed,
//          data cursor, parameter count, the optimizer range [begin, end)
//   params all parameters, float32 (rank 0 only; every rank holds the same)
//   adam_m, adam_v  the optimizer state of [begin, end)
//   rng    the CPU generator's state
//   buffer:NAME  every module buffer (rank 0): POET's W0, permutations or
//          index sets, which change at merges

// Under pipeline parallelism (`stages` > 1, ranks laid out as in
// pipeline_plan.h) each stage's data-parallel rank 0 writes its stage's
// parameters (and with --shard-optimizer every rank its moments), in the same
// step directory, all files named by world rank; meta records "stage" and
// "stages". One COMPLETE marker covers every stage, so a checkpoint is whole
// across the pipeline or not at all; a rank restores only from its stage's files.
//
// Restoring reads the optimizer state for the rank's own range from whichever
// files overlap it, so a run may resume with another world size.
#pragma once

#include <cstdint>
#include <optional>

#include "common/status.h"
#include "trainer/optim/adamw.h"
#include "trainer/config.h"
#include "trainer/comm/dist.h"
#include "trainer/model/model.h"
#include "trainer/model/params.h"

namespace bulwark::trainer {

struct TrainState {
  int64_t step = 0;          // optimizer steps completed
  uint64_t data_cursor = 0;  // global samples consumed (sampler.h)
  double loss = 0;           // mean training loss of the last step, for reports
};

// Collective: every rank calls it at the same step.
// `comm` is the whole world; `stages` the pipeline depth.
Status SaveCheckpoint(const TrainConfig& cfg, Comm& comm, torch::nn::Module& model, ParamStore& store, AdamW& opt,
                      const TrainState& st, int stages = 1);

// Collective. Loads the newest valid checkpoint in cfg.ckpt_dir into `store`
// and `opt`; nullopt when there is none. Skipped candidates are reported
// through `note` (one line each). A checkpoint of another model shape,
// optimizer or seed is an error, not a skip: loading on would be wrong.
Result<std::optional<TrainState>> LoadCheckpoint(const TrainConfig& cfg, Comm& comm, torch::nn::Module& model,
                                                 ParamStore& store, AdamW& opt,
                                                 const std::function<void(const std::string&)>& note,
                                                 int stages = 1);

}  // namespace bulwark::trainer
