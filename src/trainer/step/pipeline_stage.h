// One pipeline stage of one replica (pipeline.h): its layers, its
// neighbours, the saved tensors of micro-batches in flight. The fixed 1F1B
// pipeline (pipeline.cc) and the elastic one (elastic_pipeline.cc) both run
// their micro-batches through it.
#pragma once

#include <map>
#include <string>

#include "common/status.h"
#include "trainer/comm/dist.h"
#include "trainer/model/model.h"
#include "trainer/model/params.h"
#include "trainer/step/pipeline_plan.h"

namespace bulwark::trainer {

class Stage {
 public:
  Stage(Transformer& model, Comm& world, const PipelineCoords& c, const StageLayers& layers, int micro_b, int T)
      : model_(model), world_(world), c_(c), layers_(layers), mb_(micro_b), T_(T),
        device_(model->parameters().front().device()) {}

  // Runs micro-batch `m` (its position in this step's schedule: the tag of
  // its messages) forward. idx/targets: its (mb, T) samples (read only on
  // the first / last stage). The last stage's loss goes to `last_loss` and
  // into `loss_sum`; its gradient is scaled by `loss_scale`.
  Status Forward(int m, const torch::Tensor& idx, const torch::Tensor& targets, double loss_scale);
  Status Backward(int m);
  // Forward only, for validation batch `tag`: the loss on the last stage.
  Result<double> EvalForward(int tag, const torch::Tensor& idx, const torch::Tensor& targets, int B);

  double loss_sum = 0;   // last stage: the step's micro-batch losses
  double last_loss = 0;  // last stage: the newest micro-batch's loss
  double wait_ms = 0;    // time blocked on receives

 private:
  struct Saved {
    torch::Tensor input;   // received activations (requires grad); undefined on the first stage
    torch::Tensor output;  // sent activations, or the scaled loss on the last stage
  };
  // A buffer for B samples' activations (or their gradients) as they
  // arrive: on the model's device, as the layers read them.
  torch::Tensor Activations(int64_t B) const;
  static torch::Tensor CrossEntropyLoss(const torch::Tensor& logits, const torch::Tensor& targets);
  int Prev() const { return RankOf(c_.dp, c_.pp - 1, c_.dp_size); }
  int Next() const { return RankOf(c_.dp, c_.pp + 1, c_.dp_size); }

  Transformer& model_;
  Comm& world_;
  PipelineCoords c_;
  StageLayers layers_;
  int64_t mb_, T_;
  torch::Device device_;
  std::map<int, Saved> saved_;
};

// A 64-bit digest per stage (from its DP rank 0), combined in stage order:
// equal iff every stage's parameters are bitwise equal.
Result<std::string> PipelineChecksum(Comm& world, const PipelineCoords& c, ParamStore& store);

}  // namespace bulwark::trainer
