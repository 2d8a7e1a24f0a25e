// Elastic data parallelism (--elastic-replicas N): the replicas that are
// left keep training when one is lost, with the training math of the full
// job, and a replica that comes back takes its state from a live peer.
//
// The full job has N data-parallel replicas. Each step's global batch is
// N x --batch-size samples in U = N x M micro-batches (M = --micro-batches,
// default 1), micro-batch j being samples [jB/M, (j+1)B/M) of the step. A
// world of W <= N ranks splits them round robin (rank r computes j = r,
// r + W, ...), so the global batch and the order of the data do not change
// with the width. A step at width W takes ceil(U/W) micro-batch times: with
// M = 1, 2 of 3 replicas train at half speed; with M = 2, at 2/3 (the
// replicas' share). Each rank keeps all but one of its micro-batches'
// gradients aside until the reduction (M - 1 copies at full width).
//
// The gradient sum does not change either, to the bit. Each micro-batch's
// gradient is rounded to a 64-bit fixed-point integer at one exponent every
// rank agrees on (from the all-reduced max |g|, an exact operation), the
// integers are added (exact in any order, on any rank, in any tree), and
// the sum is converted back once. A run at width 3 of 4 computes the same
// parameters as the run at width 4: no reduction order to state.
//
// A new generation of an elastic job does not restore from a checkpoint
// when some of its ranks are still alive: their state is the newest there
// is. SyncLiveState finds the newest step held live, and a rank behind it
// (a pre-spawned spare, a survivor whose last all-reduce failed while
// others completed it) receives the whole state from the lowest such rank,
// point to point. Nobody waits for that transfer: the donor sends a copy
// and goes on, and the generation's first step leaves the healing ranks
// out of the micro-batches (the exact sum does not care who computed
// what), so they join at its reduction with the state it started from.
// Ranks that all hold it already exchange nothing but two numbers.
// docs/recovery.md, "Elastic data parallelism".
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/state/checkpoint.h"
#include "trainer/state/memory_checkpoint.h"
#include "trainer/step/step_driver.h"
#include "trainer/step/train_loop.h"

namespace bulwark::trainer {

// The micro-batches rank `rank` of `world` computes, of `replicas`.
std::vector<int> MicroBatchesOf(int replicas, int rank, int world);

// Sums `grads` (this rank's micro-batch gradients, float, equal lengths)
// over every rank into `out` divided by `units` (the micro-batches of the
// global batch), and the micro-batch losses (`losses[i]` is micro-batch
// `index[i]`'s) into their mean. The
// result is bitwise the same whichever rank computed which micro-batch.
// A non-finite gradient anywhere makes `out` and the loss NaN on every rank.
// `out` may be one of `grads`: it is written after every input is read.
// `vote` (may be null, the same on every rank): the splice vote rides on
// the reduction's first all-reduce (train_loop.h: SpliceVote).
Status ExactMeanOfMicroBatches(Comm& comm, const std::vector<torch::Tensor>& grads, const std::vector<int>& index,
                               const std::vector<double>& losses, int units, torch::Tensor out, double* loss,
                               TrainProcess::SpliceVote* vote = nullptr);

// One rank's (or one pipeline replica's) share of an elastic step's
// micro-batches, and what it keeps of them until the reduction: every
// micro-batch's loss, and the gradients of all but the last, copied aside
// (the last stays in the store, where the step driver's hooks read it).
// Members `healing` of the generation compute none of its first step
// (SyncLiveState); after it, every member takes its share.
class MicroBatchShare {
 public:
  // Member `who` of `width`, over `units` micro-batches of `params` floats.
  MicroBatchShare(int units, int64_t params, int who, int width, const std::vector<int>& healing);
  const std::vector<int>& mine() const { return mine_; }
  bool empty() const { return mine_.empty(); }
  // Micro-batch i of mine() computed its gradient (in the store) and loss.
  void Computed(size_t i, const torch::Tensor& grads, double loss);
  double last_loss() const { return losses_.empty() ? 0.0 : losses_.back(); }
  // The exact mean over `comm` of every member's micro-batches (elastic.h)
  // into `out`: those set aside, and `last` for the last one, whose loss is
  // `last_loss` where the caller has one (a pipeline's last stage).
  Status Reduce(Comm& comm, const torch::Tensor& last, std::optional<double> last_loss, torch::Tensor out,
                double* loss, TrainProcess::SpliceVote* vote = nullptr);
  // The generation's first step is applied: a share that healed anyone is
  // recut for every member. True when mine() changed.
  bool AfterStep(int who, int width);

 private:
  void Assign(std::vector<int> mine);
  const int units_;
  const int64_t params_;
  bool healing_;
  std::vector<int> mine_;
  std::vector<torch::Tensor> aside_;
  std::vector<double> losses_;
};

// The mean validation loss of `sums` (one float64 slot per batch, zero
// where another rank computed it; `counts` 1 where one did), all-reduced
// over `comm` and added in slot order: the same bits at any width. B x T:
// a batch's shape, for the error when no batch fits the split.
Result<double> MeanOfValidationSlots(Comm& comm, torch::Tensor sums, torch::Tensor counts, int B, int T);

// The elastic data-parallel step (a StepLayout for the step driver).
// `healing` (LiveSync) compute no micro-batch of the first step.
std::unique_ptr<StepLayout> MakeElasticStep(TrainProcess& p, Comm& comm, const std::vector<int>& healing = {});

// What a generation's live state sync found.
struct LiveSync {
  bool synced = false;    // false: no rank held a live state; restore as usual
  int64_t step = 0;       // the step every rank now holds
  int donor = -1;         // the lowest live rank, whose state every copy is (-1: every rank held it)
  bool received = false;  // this rank's state came, copied along the ring, from the donor
  std::vector<int> healing;  // the ranks that received it
  double ms = 0;
};

// Collective over `comm`. Brings every rank to the newest live state (see
// the top of this file) into `st`, continuing `mem`'s timeline.
Result<LiveSync> SyncLiveState(Comm& comm, TrainProcess& p, MemoryCheckpoint* mem, TrainState* st);

}  // namespace bulwark::trainer
