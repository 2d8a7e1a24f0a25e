// The pipeline-parallel loop, top to bottom: setup, then per step
//   maybe-eval -> 1F1B over micro-batches -> DP all-reduce -> norm + loss
//   across stages -> clip -> AdamW -> log -> maybe-checkpoint.
#include "trainer/pipeline.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <thread>

#include "client/rank_link.h"
#include "common/checksum.h"
#include "trainer/adamw.h"
#include "trainer/checkpoint.h"
#include "trainer/dist.h"
#include "trainer/kernels.h"
#include "trainer/memory_checkpoint.h"
#include "trainer/model.h"
#include "trainer/params.h"
#include "trainer/pipeline_plan.h"
#include "trainer/precision.h"
#include "trainer/progress.h"
#include "trainer/sampler.h"
#include "trainer/sdc.h"
#include "trainer/simd.h"
#include "trainer/tokens.h"

namespace bulwark::trainer {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

// Tags of point-to-point messages: activations of micro-batch m travel with
// 2m, their gradients with 2m + 1; evaluation uses its own range.
constexpr int kEvalTag = 1 << 24;

// Samples [first, first + B) of the sampler's order -> idx, targets (B, T).
void MakeBatch(const std::vector<uint16_t>& tokens, Sampler& sampler, uint64_t first, int B, int T,
               torch::Tensor& idx, torch::Tensor& targets) {
  auto* x = idx.data_ptr<int64_t>();
  auto* y = targets.data_ptr<int64_t>();
  for (int b = 0; b < B; ++b) {
    uint64_t start = sampler.SampleStart(first + b);
    for (int t = 0; t < T; ++t) {
      x[b * T + t] = tokens[start + t];
      y[b * T + t] = tokens[start + t + 1];
    }
  }
}

// One stage of one replica: its layers, its neighbours, the saved tensors of
// micro-batches in flight.
class Stage {
 public:
  Stage(Transformer& model, Comm& world, const PipelineCoords& c, const StageLayers& layers, int micro_b, int T)
      : model_(model), world_(world), c_(c), layers_(layers), mb_(micro_b), T_(T) {}

  // Runs one micro-batch forward. idx/targets: this micro-batch's (mb, T)
  // slices (read only on the first / last stage).
  Status Forward(int m, const torch::Tensor& idx, const torch::Tensor& targets, double loss_scale) {
    Saved s;
    torch::Tensor h;
    if (layers_.embed) {
      h = model_->Embed(idx);
    } else {
      s.input = torch::empty({mb_, T_, model_->cfg.d_model});
      auto t0 = Clock::now();
      BULWARK_RETURN_IF_ERROR(world_.Recv(s.input, Prev(), 2 * m));
      wait_ms += Ms(t0, Clock::now());
      s.input.requires_grad_(true);
      h = s.input;
    }
    h = model_->Body(h, layers_.first, layers_.last);
    if (layers_.head) {
      auto logits = model_->Head(h);
      auto loss = CrossEntropyLoss(logits, targets);
      loss_sum += loss.item<double>();
      s.output = loss * loss_scale;  // the step's loss is the mean over micro-batches
    } else {
      s.output = h;
      BULWARK_RETURN_IF_ERROR(world_.Send(h.detach(), Next(), 2 * m));
    }
    saved_[m] = std::move(s);
    return Status::OK();
  }

  Status Backward(int m) {
    Saved s = std::move(saved_[m]);
    saved_.erase(m);
    if (layers_.head) {
      s.output.backward();
    } else {
      auto grad = torch::empty({mb_, T_, model_->cfg.d_model});
      auto t0 = Clock::now();
      BULWARK_RETURN_IF_ERROR(world_.Recv(grad, Next(), 2 * m + 1));
      wait_ms += Ms(t0, Clock::now());
      s.output.backward(grad);
    }
    if (!layers_.embed) BULWARK_RETURN_IF_ERROR(world_.Send(s.input.grad(), Prev(), 2 * m + 1));
    return Status::OK();
  }

  // Forward only, for validation: returns the summed loss on the last stage.
  Result<double> EvalForward(int i, const torch::Tensor& idx, const torch::Tensor& targets, int B) {
    torch::NoGradGuard no_grad;
    torch::Tensor h;
    if (layers_.embed) {
      h = model_->Embed(idx);
    } else {
      h = torch::empty({B, T_, model_->cfg.d_model});
      BULWARK_RETURN_IF_ERROR(world_.Recv(h, Prev(), kEvalTag + i));
    }
    h = model_->Body(h, layers_.first, layers_.last);
    if (!layers_.head) {
      BULWARK_RETURN_IF_ERROR(world_.Send(h, Next(), kEvalTag + i));
      BULWARK_RETURN_IF_ERROR(world_.WaitSends());
      return 0.0;
    }
    return CrossEntropyLoss(model_->Head(h), targets).item<double>();
  }

  double loss_sum = 0;  // last stage: the step's micro-batch losses
  double wait_ms = 0;   // time blocked on receives

 private:
  struct Saved {
    torch::Tensor input;   // received activations (requires grad); undefined on the first stage
    torch::Tensor output;  // sent activations, or the scaled loss on the last stage
  };
  static torch::Tensor CrossEntropyLoss(const torch::Tensor& logits, const torch::Tensor& targets);
  int Prev() const { return RankOf(c_.dp, c_.pp - 1, c_.dp_size); }
  int Next() const { return RankOf(c_.dp, c_.pp + 1, c_.dp_size); }

  Transformer& model_;
  Comm& world_;
  PipelineCoords c_;
  StageLayers layers_;
  int64_t mb_, T_;
  std::map<int, Saved> saved_;
};

torch::Tensor Stage::CrossEntropyLoss(const torch::Tensor& logits, const torch::Tensor& targets) {
  return kernels::CrossEntropy(logits.view({-1, logits.size(-1)}), targets.reshape({-1}));
}

// A 64-bit digest per stage (from its DP rank 0), combined in stage order:
// equal iff every stage's parameters are bitwise equal. The halves travel
// as doubles, which hold 32-bit integers exactly.
Result<std::string> PipelineChecksum(Comm& world, const PipelineCoords& c, ParamStore& store) {
  std::string mine = store.Checksum();
  auto t = torch::zeros({2 * c.pp_size}, torch::kFloat64);
  if (c.dp == 0) {
    uint64_t v = std::stoull(mine, nullptr, 16);
    t[2 * c.pp] = static_cast<double>(v >> 32);
    t[2 * c.pp + 1] = static_cast<double>(v & 0xffffffffu);
  }
  std::vector<torch::Tensor> v{t};
  BULWARK_RETURN_IF_ERROR(world.AllReduceSum(v));
  bulwark::Checksum sum;
  for (int s = 0; s < c.pp_size; ++s) {
    uint64_t x = (static_cast<uint64_t>(t[2 * s].item<double>()) << 32) |
                 static_cast<uint64_t>(t[2 * s + 1].item<double>());
    sum.Update(&x, sizeof x);
  }
  return sum.HexDigest();
}

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
  auto link_or = client::RankLink::FromEnv(rank);
  if (!link_or.ok()) return link_or.status();
  std::unique_ptr<client::RankLink> link = std::move(*link_or);

  const auto t_rendezvous = Clock::now();
  const auto split = SplitLayers(cfg.model.n_layers, c.pp_size);
  const StageLayers& layers = split[c.pp];
  Transformer model(cfg.model);
  model->Initialize(cfg.seed);  // the whole model: every stage's share as a single-stage run draws it
  ParamStore store(StageParameters(model, layers), c.dp_size);
  if (cfg.model.bf16) model->UseBf16Shadow(store.params());
  int64_t opt_begin = 0, opt_end = store.num_params();
  if (cfg.shard_optimizer) {
    int64_t chunk = store.params().numel() / c.dp_size;
    opt_begin = c.dp * chunk;
    opt_end = std::min(store.num_params(), opt_begin + chunk);
  }
  AdamW opt(store, opt_begin, opt_end, {cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay});

  const auto t_init = Clock::now();
  TrainState st;
  auto note = [&](const std::string& s) {
    if (rank == 0) {
      progress.Note(s);
    } else {
      std::fprintf(stderr, "rank %d: %s\n", rank, s.c_str());
      std::fflush(stderr);
    }
  };
  // Every-step in-memory checkpoints: a stage's DP group splits its state
  // into shards; the whole world agrees on the step.
  auto memory = MemoryCheckpoint::Open(cfg, world, model, store, opt, note, &dp);
  if (!memory.ok()) return memory.status();
  MemoryCheckpoint* mem = memory->get();
  bool restored = false;
  if (mem != nullptr) {
    auto outcome = mem->Restore(&st);
    if (!outcome.ok()) return outcome.status();
    if (*outcome) {
      restored = true;
      const RestoreOutcome& o = **outcome;
      if (rank == 0) {
        Progress::Emit({{"event", "restore"}, {"step", o.step}, {"source", o.source}, {"sources", o.sources},
                        {"newest_step", o.newest_step}, {"ms", o.ms}});
      }
      progress.Note("restored step " + std::to_string(o.step) + " from " + o.source + " in " +
                    std::to_string(static_cast<int>(o.ms)) + " ms");
    }
  }
  if (cfg.resume && !restored) {
    auto loaded = LoadCheckpoint(cfg, world, *model, store, opt, note, c.pp_size);
    if (!loaded.ok()) return loaded.status();
    if (*loaded) {
      st = **loaded;
      progress.Note("resumed from " + cfg.ckpt_dir + " at step " + std::to_string(st.step));
      if (mem != nullptr) mem->ResumedFromDisk(st.step);
      if (rank == 0) {
        Progress::Emit({{"event", "restore"}, {"step", st.step}, {"source", "disk"}, {"newest_step", st.step},
                        {"ms", Ms(t_init, Clock::now())}});
      }
    } else {
      // None at all (a first launch), or only rejected ones under
      // --allow-fresh-start; LoadCheckpoint refuses the rest.
      progress.Note("no valid checkpoint in " + cfg.ckpt_dir + "; starting from step 0");
    }
  }
  const auto t_ready = Clock::now();
  const int B = cfg.batch_size, T = cfg.model.context, M = cfg.micro_batches, mb = B / M;
  const double bubble = BubbleFraction(c.pp_size, M);
  progress.Start({{"data_ms", Ms(t_start, t_data)}, {"rendezvous_ms", Ms(t_data, t_rendezvous)},
                  {"init_ms", Ms(t_rendezvous, t_init)}, {"checkpoint_load_ms", Ms(t_init, t_ready)},
                  {"params", CountParameters(*model)}, {"stage_params", store.num_params()},
                  {"world_size", world.world_size()}, {"dp", c.dp_size}, {"pp", c.pp_size}, {"micro_batches", M},
                  {"split", DescribeSplit(split)}, {"bubble_fraction", bubble}, {"optimizer", cfg.optimizer},
                  {"steps", cfg.steps}, {"start_step", st.step}, {"threads", threads},
                  {"shape", cfg.model.ShapeString()}, {"shard_optimizer", cfg.shard_optimizer},
                  {"precision", precision->reason}});
  progress.Note("precision: " + precision->reason);
  progress.Note("pipeline: DP " + std::to_string(c.dp_size) + " x PP " + std::to_string(c.pp_size) + ", " +
                std::to_string(M) + " micro-batches of " + std::to_string(mb) + "; " + DescribeSplit(split));

  std::vector<torch::Tensor> buckets;
  const int64_t bucket = std::max<int64_t>(1, static_cast<int64_t>(cfg.bucket_mb * (1 << 20) / sizeof(float)));
  for (int64_t b = 0; b < store.grads().numel(); b += bucket) {
    buckets.push_back(store.grads().narrow(0, b, std::min(bucket, store.grads().numel() - b)));
  }
  auto idx = torch::empty({B, T}, torch::kInt64), targets = torch::empty({B, T}, torch::kInt64);
  const int64_t tokens_per_step = static_cast<int64_t>(B) * T * c.dp_size;
  Stage stage(model, world, c, layers, mb, T);
  const auto schedule = OneFOneB(c.pp, c.pp_size, M);

  // Validation through the pipeline: each replica's share of the first
  // eval_batches batches, summed over the last stage's replicas.
  auto evaluate = [&]() -> Result<double> {
    const uint64_t n_samples = (data->val.size() - 1) / T;
    auto vi = torch::empty({B, T}, torch::kInt64), vt = torch::empty({B, T}, torch::kInt64);
    double sum = 0, count = 0;
    for (int i = 0; i < cfg.eval_batches; ++i) {
      uint64_t first = (static_cast<uint64_t>(i) * c.dp_size + c.dp) * B;
      if (first + B > n_samples) break;
      auto* x = vi.data_ptr<int64_t>();
      auto* y = vt.data_ptr<int64_t>();
      for (int b = 0; b < B; ++b)
        for (int t = 0; t < T; ++t) {
          x[b * T + t] = data->val[(first + b) * T + t];
          y[b * T + t] = data->val[(first + b) * T + t + 1];
        }
      auto l = stage.EvalForward(i, vi, vt, B);
      if (!l.ok()) return l.status();
      if (layers.head) sum += *l, count += 1;
    }
    auto acc = torch::tensor({sum, count}, torch::kFloat64);
    std::vector<torch::Tensor> v{acc};
    BULWARK_RETURN_IF_ERROR(world.AllReduceSum(v));
    if (acc[1].item<double>() == 0) {
      return Status::InvalidArgument("the validation split is smaller than one batch; lower --batch-size or --eval-batches");
    }
    return acc[0].item<double>() / acc[1].item<double>();
  };

  // --------------------------------------------------------------------------
  // The loop. `st.step` counts completed steps; step s+1 is being computed.
  double last_fwd_ms = 0, last_ckpt_ms = 0;
  // The emulated bad machine's corruption (sdc.h), as in train.cc: from the
  // environment or a rank-link inject.
  std::optional<Sdc> sdc = Sdc::FromEnv();
  while (st.step < cfg.steps) {
    if (cfg.eval_every > 0 && st.step % cfg.eval_every == 0) {
      // Not a step: the hang detector gets the phase's own allowance.
      if (link) link->Phase("eval", std::max(1000.0, 2 * cfg.eval_batches * last_fwd_ms), st.step);
      auto val = evaluate();
      if (!val.ok()) return val.status();
      progress.Eval(st.step, *val);
    }
    const auto t0 = Clock::now();

    // ---- the agent's test hook: silent data corruption stays on once
    // injected ("sdc-nan:R" / "sdc-drift:R"); the pipeline has no other hook.
    if (link) {
      const std::string inject = link->PollInject().value_or("");
      if (inject.rfind("sdc-", 0) == 0) sdc = Sdc::Parse(inject.substr(4));
    }

    // ---- 1F1B over this replica's micro-batches
    store.ZeroGrad();
    MakeBatch(data->train, sampler, st.data_cursor + static_cast<uint64_t>(c.dp) * B, B, T, idx, targets);
    stage.loss_sum = 0;
    stage.wait_ms = 0;
    double fwd_ms = 0, bwd_ms = 0;
    for (const PipeOp& op : schedule) {
      auto t = Clock::now();
      if (op.kind == PipeOp::kForward) {
        BULWARK_RETURN_IF_ERROR(stage.Forward(op.micro, idx.narrow(0, op.micro * mb, mb),
                                              targets.narrow(0, op.micro * mb, mb), 1.0 / M));
        fwd_ms += Ms(t, Clock::now());
      } else {
        BULWARK_RETURN_IF_ERROR(stage.Backward(op.micro));
        bwd_ms += Ms(t, Clock::now());
      }
    }
    BULWARK_RETURN_IF_ERROR(world.WaitSends());
    store.LossSlot().fill_(layers.head ? stage.loss_sum / M : 0.0);
    // Like a bad ALU feeding the all-reduce: silent, no log line, no flag.
    if (sdc) {
      torch::Tensor g = store.GradsView();
      sdc->Corrupt(g);
    }
    const auto t_bwd = Clock::now();

    // ---- average gradients (and the loss) across the stage's replicas
    if (c.dp_size > 1) {
      BULWARK_RETURN_IF_ERROR(dp.AllReduceSum(buckets));
      store.grads().div_(c.dp_size);
    }
    // ---- the global gradient norm and the loss, from each stage's replica 0
    auto norm_loss = torch::zeros({2}, torch::kFloat64);
    if (c.dp == 0) {
      norm_loss[0] = store.GradsView().to(torch::kFloat64).pow(2).sum();
      if (layers.head) norm_loss[1] = store.LossSlot().item<double>();
    }
    if (world.world_size() > 1) {
      std::vector<torch::Tensor> v{norm_loss};
      BULWARK_RETURN_IF_ERROR(world.AllReduceSum(v));
    }
    st.loss = norm_loss[1].item<double>();
    double grad_norm = std::sqrt(norm_loss[0].item<double>());
    const auto t_comm = Clock::now();
    // ---- a non-finite loss or gradient is held back, as in data-parallel
    // training (train_loop.cc): nothing applied, nothing checkpointed, so the
    // newest copy is the step before it. Every rank sees the same all-reduced
    // values. The controller decides; a pipeline rank cannot wait for the
    // next generation in place, so it waits to be stopped.
    if (!std::isfinite(st.loss) || !std::isfinite(grad_norm)) {
      const std::string what = "step " + std::to_string(st.step + 1) + ": non-finite loss or grad norm (loss " +
                               std::to_string(st.loss) + ", grad norm " + std::to_string(grad_norm) + ")";
      note("holding back " + what + "; not applied");
      if (!link) return Status::FailedPrecondition(what + "; stopped before applying it");
      client::StepSignal sig = client::StepSignal::Halted(st.step + 1, st.loss, grad_norm, "nan");
      sig.local_nonfinite = true;
      link->Step(sig);
      if (mem != nullptr) BULWARK_RETURN_IF_ERROR(mem->WaitCopied());
      if (!link->WaitClosed(5 * 60 * 1000)) {
        return Status::FailedPrecondition(what + "; held back, and no restart came within 5 minutes");
      }
      return Status::Unavailable(what + "; held back, and the agent restarts the job");
    }

    // ---- clip, update, re-assemble sharded parameters
    if (cfg.grad_clip > 0 && grad_norm > cfg.grad_clip) store.GradsView().mul_(cfg.grad_clip / (grad_norm + 1e-6));
    const double lr = LearningRate(st.step, cfg.steps, cfg.warmup_steps, cfg.lr, cfg.min_lr_ratio);
    // The update changes what the background copy of the last step reads.
    if (mem != nullptr) BULWARK_RETURN_IF_ERROR(mem->WaitCopied());
    opt.Step(lr, st.step + 1);
    if (cfg.shard_optimizer && c.dp_size > 1) BULWARK_RETURN_IF_ERROR(dp.AllGatherChunks(store.params()));
    st.step += 1;
    st.data_cursor += static_cast<uint64_t>(B) * c.dp_size;

    // ---- in-memory checkpoint: copied during the next step's 1F1B
    if (mem != nullptr) BULWARK_RETURN_IF_ERROR(mem->Save(st));

    // ---- report: forward/backward are compute plus waits for neighbours
    const auto t_end = Clock::now();
    double ms = Ms(t0, t_end);
    StepReport report{st.step, cfg.steps, st.loss, lr, grad_norm, ms, tokens_per_step * 1000.0 / ms,
                      fwd_ms, bwd_ms, Ms(t_bwd, t_comm) + stage.wait_ms, Ms(t_comm, t_end)};
    if (mem != nullptr) {
      report.ckpt_block_ms = mem->TakeBlockedMs();
      report.ckpt_copy_cpu_ms = mem->TakeCopyCpuMs();
    }
    progress.Step(report);
    last_fwd_ms = fwd_ms;
    if (link) {
      // Compute is this stage's own work: the waits for its neighbours are
      // communication (a slow neighbour shows up in its own compute time).
      client::StepSignal sig;
      sig.step = st.step;
      sig.loss = st.loss;
      sig.grad_norm = grad_norm;
      sig.local_grad_norm = grad_norm;
      sig.step_ms = ms;
      sig.compute_ms = std::max(0.0, fwd_ms + bwd_ms - stage.wait_ms);
      sig.comm_ms = Ms(t_bwd, t_comm) + stage.wait_ms;
      sig.local_nonfinite = !std::isfinite(grad_norm) || !std::isfinite(st.loss);
      sig.observed_ms = WallMs();
      link->Step(sig);
    }

    // ---- checkpoint
    if (cfg.ckpt_every > 0 && (st.step % cfg.ckpt_every == 0 || st.step == cfg.steps)) {
      if (link) link->Phase("checkpoint", std::max(1000.0, last_ckpt_ms), st.step);
      const auto t_ckpt = Clock::now();
      BULWARK_RETURN_IF_ERROR(SaveCheckpoint(cfg, world, *model, store, opt, st, c.pp_size));
      last_ckpt_ms = Ms(t_ckpt, Clock::now());
    }
    if (cfg.stop_at > 0 && st.step >= cfg.stop_at) break;  // as if preempted
  }

  if (cfg.eval_every > 0 && st.step == cfg.steps) {
    auto val = evaluate();
    if (!val.ok()) return val.status();
    progress.Eval(st.step, *val);
  }
  auto checksum = PipelineChecksum(world, c, store);
  if (!checksum.ok()) return checksum.status();
  progress.Done(st.step, st.loss, *checksum, std::chrono::duration<double>(Clock::now() - t_start).count());
  return Status::OK();
}

}  // namespace bulwark::trainer
