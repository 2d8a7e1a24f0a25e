// Pipeline-parallel training: its setup, and the 1F1B step that the step
// driver (step_driver.h) runs: 1F1B over micro-batches -> DP all-reduce ->
// norm + loss across stages.
#include "trainer/pipeline.h"
#include "trainer/train_loop.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "rank_client/rank_link.h"
#include "trainer/adamw.h"
#include "trainer/checkpoint.h"
#include "trainer/dist.h"
#include "trainer/memory_checkpoint.h"
#include "trainer/model.h"
#include "trainer/params.h"
#include "trainer/pipeline_plan.h"
#include "trainer/pipeline_stage.h"
#include "trainer/precision.h"
#include "trainer/progress.h"
#include "trainer/sampler.h"
#include "trainer/sdc.h"
#include "trainer/simd.h"
#include "trainer/step_driver.h"
#include "trainer/tokens.h"

namespace bulwark::trainer {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

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
      auto t0 = Clock::now();
      if (op.kind == PipeOp::kForward) {
        BULWARK_RETURN_IF_ERROR(stage_.Forward(op.micro, idx_.narrow(0, op.micro * mb_, mb_),
                                               targets_.narrow(0, op.micro * mb_, mb_), 1.0 / M));
        t->forward_ms += Ms(t0, Clock::now());
      } else {
        BULWARK_RETURN_IF_ERROR(stage_.Backward(op.micro));
        t->backward_ms += Ms(t0, Clock::now());
      }
    }
    BULWARK_RETURN_IF_ERROR(world_.WaitSends());
    store_.LossSlot().fill_(layers_.head ? stage_.loss_sum / M : 0.0);
    t->wait_ms = stage_.wait_ms;
    return Status::OK();
  }

  [[noreturn]] void SpinInCompute() override {
    torch::NoGradGuard no_grad;
    for (;;) model_->Body(model_->Embed(idx_), layers_.first, layers_.last);
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

Status TrainPipeline(const TrainConfig& cfg_in) {
  TrainConfig cfg = cfg_in;
  const auto t_start = Clock::now();

  // --------------------------------------------------------------------------
  // Setup: what this rank is, data, groups, its stage of the model.
  if (cfg.model.poet.enabled && cfg.pp > 1) {
    return Status::InvalidArgument("--optimizer poet does not support --pp > 1 yet; use --pp 1");
  }
  if (!simd::CpuSupported()) return Status::InvalidArgument("bulwark-train needs a CPU with AVX2 and FMA");
  auto precision = ChoosePrecision(cfg.precision, HostCpuBf16());
  if (!precision.ok()) return precision.status();
  cfg.model.bf16 = precision->bf16;
  int threads = cfg.threads > 0 ? cfg.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(threads);

  auto env = ReadDistEnv();
  if (!env.ok()) return env.status();
  auto coords_or = RankCoords(env->rank, env->world_size, cfg.pp);
  if (!coords_or.ok()) return coords_or.status();
  const PipelineCoords c = *coords_or;

  auto data = LoadDataSet(cfg.data_dir);
  if (!data.ok()) return data.status();
  if (cfg.model.vocab_size == 0) cfg.model.vocab_size = data->vocab_size;
  if (cfg.model.vocab_size < data->vocab_size) {
    return Status::InvalidArgument("--vocab-size " + std::to_string(cfg.model.vocab_size) +
                                   " is smaller than the tokenizer's " + std::to_string(data->vocab_size));
  }
  Sampler sampler(data->train.size(), cfg.model.context, cfg.seed);
  if (sampler.num_samples() < static_cast<uint64_t>(cfg.batch_size)) {
    return Status::InvalidArgument("the training split of " + cfg.data_dir + " holds fewer than --batch-size " +
                                   "samples of --context tokens");
  }

  const auto t_data = Clock::now();
  auto world_or = Comm::Connect(*env, cfg.dist_timeout_s);
  if (!world_or.ok()) return world_or.status();
  Comm& world = **world_or;
  std::vector<int> dp_ranks;
  for (int d = 0; d < c.dp_size; ++d) dp_ranks.push_back(RankOf(d, c.pp, c.dp_size));
  auto dp_or = world.Subgroup("dp-stage-" + std::to_string(c.pp), dp_ranks, cfg.dist_timeout_s);
  if (!dp_or.ok()) return dp_or.status();
  Comm& dp = **dp_or;
  const int rank = world.rank();
  Progress progress(cfg.log_format == "json", rank == 0, cfg.log_every);
  // Step signals to the agent, when one supervises this rank.
  auto link_or = rank_client::RankLink::FromEnv(rank);
  if (!link_or.ok()) return link_or.status();
  std::unique_ptr<rank_client::RankLink> link = std::move(*link_or);

  const auto t_rendezvous = Clock::now();
  const auto split = SplitLayers(cfg.model.n_layers, c.pp_size);
  const StageLayers& layers = split[c.pp];
  Transformer model(cfg.model);
  model->Initialize(cfg.seed);  // the whole model: every stage's share as a single-stage run draws it
  ParamStore store(StageParameters(model, layers), c.dp_size);
  if (cfg.model.bf16) model->UseBf16Shadow(store.params());
  int64_t opt_begin = 0, opt_end = store.num_params();
  if (cfg.shard_optimizer) {
    const Span mine = ChunkOf(store.params().numel(), c.dp_size, c.dp);
    opt_begin = std::min(store.num_params(), mine.begin);
    opt_end = std::min(store.num_params(), mine.end);
  }
  AdamW opt(store, opt_begin, opt_end, {cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay});

  const auto t_init = Clock::now();
  // The emulated bad machine's corruption (sdc.h), as in train.cc: from the
  // environment or a rank-link inject.
  std::optional<Sdc> sdc = Sdc::FromEnv();
  std::optional<SdcFile> sdc_file = SdcFile::FromEnv();
  StepDriver driver{cfg, world, model, store, opt, nullptr, link.get(), progress, sdc, c.pp_size};
  if (sdc_file) driver.sdc_file = &*sdc_file;
  // Every-step in-memory checkpoints: a stage's DP group splits its state
  // into shards; the whole world agrees on the step.
  auto memory = MemoryCheckpoint::Open(cfg, world, model, store, opt, [&](const std::string& s) { driver.Note(s); }, &dp);
  if (!memory.ok()) return memory.status();
  driver.mem = memory->get();
  TrainState st;
  Result<bool> restored = driver.Restore(&st);
  if (!restored.ok()) return restored.status();
  const auto t_ready = Clock::now();
  const int M = cfg.micro_batches, mb = cfg.batch_size / M;
  progress.Start({{"data_ms", Ms(t_start, t_data)}, {"rendezvous_ms", Ms(t_data, t_rendezvous)},
                  {"init_ms", Ms(t_rendezvous, t_init)}, {"checkpoint_load_ms", Ms(t_init, t_ready)},
                  {"params", CountParameters(*model)}, {"stage_params", store.num_params()},
                  {"world_size", world.world_size()}, {"dp", c.dp_size}, {"pp", c.pp_size}, {"micro_batches", M},
                  {"split", DescribeSplit(split)}, {"bubble_fraction", BubbleFraction(c.pp_size, M)},
                  {"optimizer", cfg.optimizer}, {"steps", cfg.steps}, {"start_step", st.step}, {"threads", threads},
                  {"shape", cfg.model.ShapeString()}, {"shard_optimizer", cfg.shard_optimizer},
                  {"precision", precision->reason}});
  progress.Note("precision: " + precision->reason);
  progress.Note("pipeline: DP " + std::to_string(c.dp_size) + " x PP " + std::to_string(c.pp_size) + ", " +
                std::to_string(M) + " micro-batches of " + std::to_string(mb) + "; " + DescribeSplit(split));

  PipelineStep layout(cfg, *data, sampler, model, store, world, dp, c, layers);
  Result<GenerationEnd> end = driver.Run(layout, st, t_start);
  if (!end.ok()) return end.status();
  if (*end == GenerationEnd::kHalted) {
    // A pipeline rank cannot wait for the next generation in place: it
    // waits to be stopped, and the agent restarts the job.
    if (!link->WaitClosed(5 * 60 * 1000)) {
      return Status::FailedPrecondition("a step was held back, and no restart came within 5 minutes");
    }
    return Status::Unavailable("a step was held back, and the agent restarts the job");
  }
  return Status::OK();
}

}  // namespace bulwark::trainer
