// Pipeline-parallel training: a rank's place in the pipeline, and the 1F1B
// step that the step driver (step_driver.h) runs: 1F1B over micro-batches
// -> DP all-reduce -> norm + loss across stages.
#include "trainer/step/pipeline.h"
#include "trainer/step/train_loop.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>

#include "trainer/optim/adamw.h"
#include "trainer/comm/dist.h"
#include "trainer/model/model.h"
#include "trainer/model/params.h"
#include "trainer/step/pipeline_plan.h"
#include "trainer/step/pipeline_stage.h"
#include "trainer/step/progress.h"
#include "trainer/data/sampler.h"
#include "trainer/step/step_driver.h"
#include "trainer/data/tokens.h"

namespace bulwark::trainer {
namespace {

// The 1F1B step: this stage over the replica's micro-batches, passing
// activations forward and their gradients back; then the stage's replicas
// all-reduce, and one world all-reduce gives every rank the global
// gradient norm and loss.
class PipelineStep final : public StepLayout {
 public:
  PipelineStep(const TrainConfig& cfg, const DataSet& data, Sampler& sampler, Transformer& model, ParamStore& store,
               Comm& world, Comm& dp, const PipelineCoords& c, const StageLayers& layers)
      : cfg_(cfg), data_(data), sampler_(sampler), model_(model), store_(store), world_(world), dp_(dp), c_(c),
        layers_(layers), mb_(cfg.batch_size / cfg.micro_batches),
        stage_(model, world, c, layers, mb_, cfg.model.context),
        schedule_(OneFOneB(c.pp, c.pp_size, cfg.micro_batches)) {
    const int B = cfg.batch_size, T = cfg.model.context;
    idx_ = torch::empty({B, T}, torch::kInt64);
    targets_ = torch::empty({B, T}, torch::kInt64);
    const int64_t bucket = std::max<int64_t>(1, static_cast<int64_t>(cfg.bucket_mb * (1 << 20) / sizeof(float)));
    for (int64_t b = 0; b < store.grads().numel(); b += bucket) {
      buckets_.push_back(store.grads().narrow(0, b, std::min(bucket, store.grads().numel() - b)));
    }
  }

  Status ForwardBackward(uint64_t cursor, StepTimes* t) override {
    const int B = cfg_.batch_size, M = cfg_.micro_batches;
    store_.ZeroGrad();
    MakeBatch(data_.train, sampler_, cursor + static_cast<uint64_t>(c_.dp) * B, B, cfg_.model.context, idx_, targets_);
    stage_.loss_sum = 0;
    stage_.wait_ms = 0;
    for (const PipeOp& op : schedule_) {
      auto t0 = TrainClock::now();
      if (op.kind == PipeOp::kForward) {
        BULWARK_RETURN_IF_ERROR(stage_.Forward(op.micro, idx_.narrow(0, op.micro * mb_, mb_),
                                               targets_.narrow(0, op.micro * mb_, mb_), 1.0 / M));
        t->forward_ms += Ms(t0, TrainClock::now());
      } else {
        BULWARK_RETURN_IF_ERROR(stage_.Backward(op.micro));
        t->backward_ms += Ms(t0, TrainClock::now());
      }
    }
    BULWARK_RETURN_IF_ERROR(world_.WaitSends());
    store_.LossSlot().fill_(layers_.head ? stage_.loss_sum / M : 0.0);
    t->wait_ms = stage_.wait_ms;
    return Status::OK();
  }

  [[noreturn]] void SpinInCompute() override {
    torch::NoGradGuard no_grad;
    const auto idx = OnDevice(idx_, store_.params().device());
    for (;;) model_->Body(model_->Embed(idx), layers_.first, layers_.last);
  }

  Status Reduce(double* loss, double* grad_norm) override {
    if (c_.dp_size > 1) {
      BULWARK_RETURN_IF_ERROR(dp_.AllReduceSum(buckets_));
      store_.grads().div_(c_.dp_size);
    }
    // The global gradient norm and the loss, from each stage's replica 0.
    auto norm_loss = torch::zeros({2}, torch::kFloat64);
    if (c_.dp == 0) {
      norm_loss[0] = store_.GradsView().to(torch::kFloat64).pow(2).sum();
      if (layers_.head) norm_loss[1] = store_.LossSlot().item<double>();
    }
    if (world_.world_size() > 1) {
      std::vector<torch::Tensor> v{norm_loss};
      BULWARK_RETURN_IF_ERROR(world_.AllReduceSum(v));
    }
    *loss = norm_loss[1].item<double>();
    *grad_norm = std::sqrt(norm_loss[0].item<double>());
    return Status::OK();
  }

  Status AfterUpdate() override {
    if (cfg_.shard_optimizer && c_.dp_size > 1) return dp_.AllGatherChunks(store_.params());
    return Status::OK();
  }

  // Validation through the pipeline: each replica's share of the first
  // eval_batches batches, summed over the last stage's replicas.
  Result<double> Evaluate() override {
    const int B = cfg_.batch_size, T = cfg_.model.context;
    const uint64_t n_samples = (data_.val.size() - 1) / T;
    auto vi = torch::empty({B, T}, torch::kInt64), vt = torch::empty({B, T}, torch::kInt64);
    double sum = 0, count = 0;
    for (int i = 0; i < cfg_.eval_batches; ++i) {
      uint64_t first = (static_cast<uint64_t>(i) * c_.dp_size + c_.dp) * B;
      if (first + B > n_samples) break;
      auto* x = vi.data_ptr<int64_t>();
      auto* y = vt.data_ptr<int64_t>();
      for (int b = 0; b < B; ++b)
        for (int t = 0; t < T; ++t) {
          x[b * T + t] = data_.val[(first + b) * T + t];
          y[b * T + t] = data_.val[(first + b) * T + t + 1];
        }
      auto l = stage_.EvalForward(i, vi, vt, B);
      if (!l.ok()) return l.status();
      if (layers_.head) sum += *l, count += 1;
    }
    auto acc = torch::tensor({sum, count}, torch::kFloat64);
    std::vector<torch::Tensor> v{acc};
    BULWARK_RETURN_IF_ERROR(world_.AllReduceSum(v));
    if (acc[1].item<double>() == 0) {
      return Status::InvalidArgument("the validation split is smaller than one batch; lower --batch-size or --eval-batches");
    }
    return acc[0].item<double>() / acc[1].item<double>();
  }

  Result<std::string> Checksum() override { return PipelineChecksum(world_, c_, store_); }
  uint64_t SamplesPerStep() const override { return static_cast<uint64_t>(cfg_.batch_size) * c_.dp_size; }
  bool RanksComparable() const override { return false; }

 private:
  const TrainConfig& cfg_;
  const DataSet& data_;
  Sampler& sampler_;
  Transformer& model_;
  ParamStore& store_;
  Comm &world_, &dp_;
  PipelineCoords c_;
  StageLayers layers_;
  int mb_;
  Stage stage_;
  std::vector<PipeOp> schedule_;
  torch::Tensor idx_, targets_;
  std::vector<torch::Tensor> buckets_;
};

}  // namespace

Result<PipelinePlace> PlaceInPipeline(TrainProcess& p, Comm& world) {
  const TrainConfig& cfg = p.cfg;
  const bool elastic = cfg.elastic_replicas > 0;
  if (cfg.model.poet.enabled && cfg.pp > 1) {
    return Status::InvalidArgument("--optimizer poet does not support --pp > 1 yet; use --pp 1");
  }
  auto c = RankCoords(world.rank(), world.world_size(), cfg.pp);
  if (!c.ok()) return c.status();
  if (p.stage >= 0 && p.stage != c->pp) {
    p.must_exit = true;
    return Status::Unavailable("rank " + std::to_string(world.rank()) + " is stage " + std::to_string(c->pp) +
                               " of this generation but its process holds stage " + std::to_string(p.stage) +
                               "; ending so that the rank restarts in a new process");
  }
  PipelinePlace place;
  place.c = *c;
  place.layers = SplitLayers(cfg.model.n_layers, cfg.pp)[c->pp];
  if (!p.store) {
    p.store = std::make_unique<ParamStore>(StageParameters(p.model, place.layers), elastic ? 1 : c->dp_size);
    if (cfg.model.bf16) p.model->UseBf16Shadow(p.store->params());
    p.stage = c->pp;
  }
  std::vector<int> ranks;
  for (int d = 0; d < c->dp_size; ++d) ranks.push_back(RankOf(d, c->pp, c->dp_size));
  auto dp = world.Subgroup("dp-stage-" + std::to_string(c->pp), ranks, cfg.dist_timeout_s, p.stage_ring.get(),
                           p.stage_plan ? &*p.stage_plan : nullptr);
  if (!dp.ok()) return dp.status();
  place.dp = std::move(*dp);
  if (p.nccl && c->dp_size > 1) BULWARK_RETURN_IF_ERROR(place.dp->UseNccl(p.device.index()));
  return place;
}

nlohmann::json PipelineStart(const TrainConfig& cfg, const PipelinePlace& place, const ParamStore& store) {
  const auto split = SplitLayers(cfg.model.n_layers, place.c.pp_size);
  return {{"stage_params", store.num_params()}, {"dp", place.c.dp_size}, {"pp", place.c.pp_size},
          {"micro_batches", cfg.micro_batches}, {"split", DescribeSplit(split)},
          {"bubble_fraction", BubbleFraction(place.c.pp_size, cfg.micro_batches)}};
}

std::string DescribePipeline(const TrainConfig& cfg, const PipelinePlace& place) {
  const int M = cfg.micro_batches;
  return "pipeline: DP " + std::to_string(place.c.dp_size) + " x PP " + std::to_string(place.c.pp_size) + ", " +
         std::to_string(M) + " micro-batches of " + std::to_string(cfg.batch_size / M) + "; " +
         DescribeSplit(SplitLayers(cfg.model.n_layers, place.c.pp_size));
}

std::unique_ptr<StepLayout> MakePipelineStep(TrainProcess& p, Comm& world, PipelinePlace& place) {
  return std::make_unique<PipelineStep>(p.cfg, p.data, *p.sampler, p.model, *p.store, world, *place.dp, place.c,
                                        place.layers);
}

}  // namespace bulwark::trainer
