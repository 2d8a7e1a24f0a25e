// The step driver: one generation's restore and step loop for every
// layout of the ranks, top to bottom:
//   restore (memory, then disk) -> per step: maybe-eval -> the agent's test
//   hooks -> the layout's forward and backward -> the layout's reduction ->
//   hold back a bad step -> clip -> update -> save in memory -> report ->
//   maybe-checkpoint -> final eval and checksum.
//
// A layout plugs in only what differs: how this rank computes its share of
// the gradients and how they are reduced across ranks. Data parallel
// (train_loop.cc) runs the whole model on its slice of the batch and
// all-reduces; the 1F1B pipeline (pipeline.cc) runs its stage over
// micro-batches, all-reduces within the stage's replicas, then combines the
// gradient norm and loss across stages. Everything else (the anomaly
// guard, the test hooks, the step report, checkpoints) is here once, so a
// fault behaves the same whatever the layout.
#pragma once

#include <optional>
#include <string>

#include "rank_client/rank_link.h"
#include "common/status.h"
#include "trainer/optim/adamw.h"
#include "trainer/state/checkpoint.h"
#include "trainer/config.h"
#include "trainer/comm/dist.h"
#include "trainer/state/memory_checkpoint.h"
#include "trainer/model/model.h"
#include "trainer/model/params.h"
#include "trainer/step/progress.h"
#include "trainer/diag/pace.h"
#include "trainer/diag/sdc.h"
#include "trainer/step/train_loop.h"

namespace bulwark::trainer {

// Where a layout's step spent its time.
struct StepTimes {
  double forward_ms = 0, backward_ms = 0;
  double wait_ms = 0;  // blocked on neighbours inside forward/backward (pipeline)
  // Shares of the batch this rank computed: an elastic rank that took over
  // a lost replica's micro-batches (elastic.h) computes more, not slower,
  // and its compute is reported per share so that the controller compares
  // machines like with like.
  int shares = 1;
};

// The digest of the parameters and POET's fixed W0 (with Q reset at a
// merge, the parameters alone would not show a difference in the merged
// weights): what every layout's checksum and the SDC check compare.
std::string StateChecksum(Transformer& model, ParamStore& store);

// What differs between layouts. Each call is collective over the ranks of
// the job, in the same order on every rank.
class StepLayout {
 public:
  virtual ~StepLayout() = default;
  // Forward and backward of this rank's share of the step whose samples
  // start at `cursor` in the sampler's order. Leaves this rank's gradients
  // in the store and its share of the loss in the store's loss slot.
  virtual Status ForwardBackward(uint64_t cursor, StepTimes* t) = 0;
  // The test hook `hang --where compute`: computes forever on this rank.
  [[noreturn]] virtual void SpinInCompute() = 0;
  // Averages the gradients (and the loss) across the job; returns the
  // global loss and gradient norm as every rank sees them.
  virtual Status Reduce(double* loss, double* grad_norm) = 0;
  // After the optimizer's step: re-assembles parameters sharded across
  // replicas (ZeRO-1).
  virtual Status AfterUpdate() = 0;
  // Mean validation loss over the job.
  virtual Result<double> Evaluate() = 0;
  // A digest of the whole model's parameters, equal on every rank.
  virtual Result<std::string> Checksum() = 0;
  // Samples one step consumes across the job (the global batch).
  virtual uint64_t SamplesPerStep() const = 0;
  // True when ranks hold the same parameters, so their own gradient norms
  // are comparable and the controller may single one out by it. Pipeline
  // stages hold different layers: they report the global norm instead.
  virtual bool RanksComparable() const = 0;
};

// What the driver runs with; the layout's setup owns all of it.
struct StepDriver {
  const TrainConfig& cfg;
  Comm& world;  // every rank of the job
  Transformer& model;
  ParamStore& store;
  AdamW& opt;
  MemoryCheckpoint* mem;       // null: no in-memory checkpoints
  rank_client::RankLink* link;      // null: no agent
  Progress& progress;
  std::optional<Sdc>& sdc;     // the emulated bad machine's corruption (sdc.h)
  int pp_size = 1;             // stages a disk checkpoint is split into
  SdcFile* sdc_file = nullptr; // the machine's emulated hardware, polled each step (sdc.h)
  PaceFile* pace_file = nullptr;  // and its compute pace (pace.h)
  // An elastic data-parallel generation's splice vote (train_loop.h), which
  // its layout's reduction carries; null where a grow yields instead.
  TrainProcess::SpliceVote* vote = nullptr;

  // Notes from every rank: rank 0's on its progress line, the others' on
  // stderr (a corrupt copy on rank 3 matters as much as one on rank 0).
  void Note(const std::string& s);
  // Restores `st` from the newest in-memory copy, else (with --resume) from
  // disk. True when a copy or a checkpoint was loaded.
  Result<bool> Restore(TrainState* st);
  // Trains from `st` to --steps (or --stop-at); kHalted when a step was held
  // back for the controller, kSpliced when every rank holds the next
  // generation (after a whole step).
  // `began`: when the process or generation began, for the final line.
  Result<GenerationEnd> Run(StepLayout& layout, TrainState& st, TrainClock::time_point began);
};

}  // namespace bulwark::trainer
