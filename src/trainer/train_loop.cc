// One generation of the training loop, top to bottom: restore, then per step
//   maybe-eval -> forward/backward -> all-reduce -> clip -> AdamW -> log -> maybe-checkpoint.
#include "trainer/train_loop.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <thread>

#include <unistd.h>

#include "client/rank_link.h"
#include "trainer/adamw.h"
#include "trainer/checkpoint.h"
#include "trainer/dist.h"
#include "trainer/memory_checkpoint.h"
#include "trainer/model.h"
#include "trainer/params.h"
#include "trainer/progress.h"
#include "trainer/sampler.h"
#include "trainer/sdc.h"
#include "trainer/simd.h"
#include "trainer/tokens.h"

namespace bulwark::trainer {
namespace {

using Clock = std::chrono::steady_clock;

// ----------------------------------------------------------------------------
// Batches

// Fills idx and targets (B, T) with the samples at global positions
// [first, first + B) of the sampler's order.
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

// A host batch on the rank's device (a CUDA rank); the CPU's is used as is.
torch::Tensor OnDevice(const torch::Tensor& t, const torch::Device& device) {
  return device.is_cpu() ? t : t.to(device);
}

// Mean validation loss over the first eval_batches*B*W validation samples in
// order; each rank evaluates its share and the sums are all-reduced.
Result<double> Evaluate(const TrainConfig& cfg, Comm& comm, Transformer& model, const std::vector<uint16_t>& val,
                        const torch::Device& device) {
  torch::NoGradGuard no_grad;
  const int B = cfg.batch_size, T = cfg.model.context;
  const uint64_t n_samples = (val.size() - 1) / T;
  auto idx = torch::empty({B, T}, torch::kInt64), tgt = torch::empty({B, T}, torch::kInt64);
  double sum = 0, count = 0;
  for (int i = 0; i < cfg.eval_batches; ++i) {
    uint64_t first = (static_cast<uint64_t>(i) * comm.world_size() + comm.rank()) * B;
    if (first + B > n_samples) break;
    auto* x = idx.data_ptr<int64_t>();
    auto* y = tgt.data_ptr<int64_t>();
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t) {
        x[b * T + t] = val[(first + b) * T + t];
        y[b * T + t] = val[(first + b) * T + t + 1];
      }
    sum += model->Loss(OnDevice(idx, device), OnDevice(tgt, device)).item<double>();
    count += 1;
  }
  auto acc = torch::tensor({sum, count}, torch::kFloat64);
  std::vector<torch::Tensor> v{acc};
  BULWARK_RETURN_IF_ERROR(comm.AllReduceSum(v));
  if (acc[1].item<double>() == 0) {
    return Status::InvalidArgument("the validation split is smaller than one batch of " + std::to_string(B) +
                                   " x " + std::to_string(T) + " tokens; lower --batch-size or --eval-batches");
  }
  return acc[0].item<double>() / acc[1].item<double>();
}

// Steps at which POET last merged before step `step` runs (0: none yet).
int64_t LastMerge(const TrainConfig& cfg, int64_t step) {
  if (!cfg.model.poet.enabled) return 0;
  return step / cfg.model.poet.merge_every * cfg.model.poet.merge_every;
}

// POET's clip threshold ramps from 0.1x back to 1x over the 10 steps after a
// merge (the reference code's calc_poet_grad_clipping_value): the fresh
// rotations start at the identity and their first gradients are the largest.
double PoetClipRamp(const TrainConfig& cfg, int64_t step) {
  int64_t last = LastMerge(cfg, step);
  if (last == 0) return 1.0;
  return 0.1 + 0.9 * std::min(1.0, static_cast<double>(step - last) / 10.0);
}

// ----------------------------------------------------------------------------
// The anomaly guard and the agent's test hooks (client/rank_link.h)

// A step is held back, not applied, when its loss or grad norm is non-finite
// or (with a spike factor from the agent) above factor x the median of the
// last 50 steps once 20 are known: the controller then decides, and the
// newest checkpoint is still the step before. The same rule as the
// controller's AnomalyDetector.
class AnomalyGuard {
 public:
  AnomalyGuard() {
    if (const char* f = std::getenv(client::kSpikeFactorEnv)) factor_ = std::atof(f);
    if (const char* a = std::getenv(client::kAcceptStepEnv)) accept_ = std::atoll(a);
  }
  // "" to apply the step, else "nan" or "spike".
  std::string Check(int64_t step, double loss, double grad_norm) const {
    if (!std::isfinite(loss) || !std::isfinite(grad_norm)) return "nan";
    if (factor_ <= 0 || step == accept_) return "";
    return Spike(loss, loss_) || Spike(grad_norm, norm_) ? "spike" : "";
  }
  void Remember(double loss, double grad_norm) {
    loss_.push_back(loss);
    norm_.push_back(grad_norm);
    if (loss_.size() > 50) loss_.pop_front();
    if (norm_.size() > 50) norm_.pop_front();
  }

 private:
  bool Spike(double v, const std::deque<double>& h) const {
    if (h.size() < 20) return false;
    std::vector<double> s(h.begin(), h.end());
    std::nth_element(s.begin(), s.begin() + s.size() / 2, s.end());
    return s[s.size() / 2] > 0 && v > factor_ * s[s.size() / 2];
  }
  double factor_ = 0;
  int64_t accept_ = -1;
  std::deque<double> loss_, norm_;
};

// `bulwark inject hang --where compute`: a rank that computes forever (a
// kernel that never ends), while its peers wait for it in the all-reduce.
[[noreturn]] void SpinInCompute(Transformer& model, const torch::Tensor& idx, const torch::Tensor& targets) {
  torch::NoGradGuard no_grad;
  for (;;) model->Loss(idx, targets);
}

nlohmann::json DiagnosePoet(Transformer& model) {
  nlohmann::json layers = nlohmann::json::array();
  double worst_orth = 0, worst_drift = 0, probe_sum = 0;
  auto poet_layers = model->PoetLayers();
  for (auto& [name, layer] : poet_layers) {
    PoetDiagnostics d = layer->Diagnose();
    layers.push_back({{"layer", name}, {"orth_r", d.orth_error_r}, {"orth_p", d.orth_error_p},
                      {"spectrum_drift", d.spectrum_drift}, {"probe", d.probe}});
    worst_orth = std::max({worst_orth, d.orth_error_r, d.orth_error_p});
    worst_drift = std::max(worst_drift, d.spectrum_drift);
    probe_sum += d.probe;
  }
  return {{"max_orth_error", worst_orth}, {"max_spectrum_drift", worst_drift},
          {"mean_probe", poet_layers.empty() ? 0.0 : probe_sum / poet_layers.size()}, {"layers", layers}};
}

}  // namespace

Result<GenerationEnd> RunGeneration(TrainProcess& p, Comm& comm, const GenerationStart& g) {
  const TrainConfig& cfg = p.cfg;
  Transformer& model = p.model;
  Sampler& sampler = *p.sampler;
  DataSet* data = &p.data;
  client::RankLink* link = p.link.get();
  const int W = comm.world_size(), rank = comm.rank();
  Progress progress(cfg.log_format == "json", rank == 0, cfg.log_every);
  // Fresh per generation, as in a new process: its history and the
  // agent's accepted step are the generation's.
  AnomalyGuard guard;
  double last_fwd_ms = 0, last_ckpt_ms = 0;

  // Padded to the world size even unsharded: in-memory checkpoint shards
  // split the state the way ZeRO-1 does. A job keeps its world size.
  if (!p.store) {
    p.store = std::make_unique<ParamStore>(*model, W);
    if (cfg.model.bf16) model->UseBf16Shadow(p.store->params());
  }
  ParamStore& store = *p.store;
  if (store.params().numel() % W != 0) {
    return Status::FailedPrecondition("this process was set up for another world size than " + std::to_string(W));
  }
  if (!p.opt || p.opt_rank != rank) {
    int64_t opt_begin = 0, opt_end = store.num_params();
    if (cfg.shard_optimizer) {
      int64_t chunk = store.params().numel() / W;
      opt_begin = rank * chunk;
      opt_end = std::min(store.num_params(), opt_begin + chunk);
    }
    p.opt = std::make_unique<AdamW>(store, opt_begin, opt_end, AdamWOptions{cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay});
    p.opt_rank = rank;
  }
  AdamW& opt = *p.opt;

  const auto t_init = Clock::now();
  TrainState st;
  // Restore notes from every rank: a corrupt copy on rank 3 matters as much
  // as one on rank 0, and only rank 0 has a progress line.
  auto note = [&](const std::string& s) {
    if (rank == 0) {
      progress.Note(s);
    } else {
      std::fprintf(stderr, "rank %d: %s\n", rank, s.c_str());
      std::fflush(stderr);
    }
  };
  auto memory = MemoryCheckpoint::Open(cfg, comm, model, store, opt, note);
  if (!memory.ok()) return memory.status();
  MemoryCheckpoint* mem = memory->get();
  // Any restore starts from a clean slate: a generation run in place must
  // not keep what the failed one left in the buffers.
  store.ZeroGrad();
  bool restored = false;
  if (mem != nullptr) {
    // The fastest copies first: this machine's memory, a backup peer's,
    // durable storage; the disk checkpoints below are the last resort.
    auto outcome = mem->Restore(&st);
    if (!outcome.ok()) return outcome.status();
    if (*outcome) {
      restored = true;
      const RestoreOutcome& o = **outcome;
      std::vector<torch::Tensor> w0;
      for (auto& [name, layer] : model->PoetLayers()) w0.push_back(layer->w0);
      if (rank == 0) {
        Progress::Emit({{"event", "restore"}, {"step", o.step}, {"source", o.source}, {"sources", o.sources},
                        {"newest_step", o.newest_step}, {"ms", o.ms}, {"checksum", store.Checksum(w0)}});
      }
      progress.Note("restored step " + std::to_string(o.step) + " from " + o.source + " in " +
                    std::to_string(static_cast<int>(o.ms)) + " ms");
    }
  }
  if (cfg.resume && !restored) {
    auto loaded = LoadCheckpoint(cfg, comm, *model, store, opt, [&](const std::string& s) { progress.Note(s); });
    if (!loaded.ok()) return loaded.status();
    if (*loaded) {
      st = **loaded;
      progress.Note("resumed from " + cfg.ckpt_dir + " at step " + std::to_string(st.step));
      if (mem != nullptr) mem->ResumedFromDisk(st.step);
      if (rank == 0) {
        Progress::Emit({{"event", "restore"}, {"step", st.step}, {"source", "disk"}, {"newest_step", st.step},
                        {"ms", std::chrono::duration<double, std::milli>(Clock::now() - t_init).count()}});
      }
    } else {
      // None at all (a first launch), or only rejected ones under
      // --allow-fresh-start; LoadCheckpoint refuses the rest.
      progress.Note("no valid checkpoint in " + cfg.ckpt_dir + "; starting from step 0");
    }
  }
  if (g.path == "rejoin" && !restored && !(cfg.resume && st.step > 0)) {
    // This process's parameters are those of the failed generation, and no
    // copy says what they should be: only a new process starts clean.
    p.must_exit = true;
    return Status::Unavailable("rank " + std::to_string(rank) + " rejoined in place but the ranks share no "
                               "checkpoint to restore; ending so that the rank restarts in a new process");
  }
  const auto t_ready = Clock::now();
  auto ms = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  // Where a (re)start's seconds go, for the supervisor's recovery breakdown;
  // the time from spawn to main() is the supervisor's to measure.
  progress.Start({{"data_ms", ms(g.began, g.data_ready)}, {"rendezvous_ms", ms(g.data_ready, g.rendezvous_done)},
                  {"init_ms", ms(g.rendezvous_done, t_init)}, {"checkpoint_load_ms", ms(t_init, t_ready)},
                  {"path", g.path}, {"assign_wait_ms", g.assign_wait_ms}, {"pid", static_cast<int64_t>(::getpid())},
                  {"params", store.num_params()}, {"world_size", W}, {"optimizer", cfg.optimizer},
                  {"poet_params", store.poet_group().end - store.poet_group().begin}, {"steps", cfg.steps},
                  {"start_step", st.step}, {"threads", p.threads}, {"shape", cfg.model.ShapeString()},
                  {"shard_optimizer", cfg.shard_optimizer}, {"precision", p.precision_reason},
                  {"device", p.device_reason}});
  if (g.path != "rejoin") progress.Note("device: " + p.device_reason + "; precision: " + p.precision_reason);

  // Gradient buckets: slices of the flat gradient buffer; the loss rides in
  // the last one (params.h).
  std::vector<torch::Tensor> buckets;
  const int64_t bucket = std::max<int64_t>(1, static_cast<int64_t>(cfg.bucket_mb * (1 << 20) / sizeof(float)));
  for (int64_t b = 0; b < store.grads().numel(); b += bucket) {
    buckets.push_back(store.grads().narrow(0, b, std::min(bucket, store.grads().numel() - b)));
  }

  const bool poet = cfg.model.poet.enabled;
  const int B = cfg.batch_size, T = cfg.model.context;
  auto idx = torch::empty({B, T}, torch::kInt64), targets = torch::empty({B, T}, torch::kInt64);
  const int64_t tokens_per_step = static_cast<int64_t>(B) * T * W;
  std::optional<Sdc>& sdc = p.sdc;

  // --------------------------------------------------------------------------
  // The loop. `st.step` counts completed steps; step s+1 is being computed.
  while (st.step < cfg.steps) {
    if (cfg.eval_every > 0 && st.step % cfg.eval_every == 0) {
      // Not a step: the hang detector gets the phase's own allowance.
      if (link) link->Phase("eval", std::max(1000.0, 2 * cfg.eval_batches * last_fwd_ms), st.step);
      auto val = Evaluate(cfg, comm, model, data->val, p.device);
      if (!val.ok()) return val.status();
      progress.Eval(st.step, *val);
    }
    const auto t0 = Clock::now();

    // ---- the agent's test hooks: one non-blocking check a step
    std::string inject;
    if (link) inject = link->PollInject().value_or("");
    // Silent data corruption stays on once injected (sdc.h): "sdc-nan:R" / "sdc-drift:R".
    if (inject.rfind("sdc-", 0) == 0) sdc = Sdc::Parse(inject.substr(4));

    // ---- forward and backward on this rank's share of the global batch
    store.ZeroGrad();
    MakeBatch(data->train, sampler, st.data_cursor + static_cast<uint64_t>(rank) * B, B, T, idx, targets);
    const torch::Tensor x = OnDevice(idx, p.device), y = OnDevice(targets, p.device);
    if (inject == "hang-compute") SpinInCompute(model, x, y);
    auto loss = model->Loss(x, y);
    const auto t_fwd = Clock::now();
    loss.backward();
    float local_loss = loss.item<float>();
    if (inject == "nan") store.GradsView()[0].fill_(std::nanf(""));  // a bad GPU's output
    if (inject == "loss-spike") local_loss *= 50;
    store.LossSlot().fill_(local_loss);
    // This rank's own gradients before the all-reduce: after it, one rank's
    // NaN is every rank's, and only this says whose it was.
    const double local_norm = link ? store.GradsView().norm().item<double>() : 0.0;
    const bool local_nonfinite = link && (!std::isfinite(local_norm) || !std::isfinite(local_loss));
    // Silent data corruption strikes after the rank looked at its own
    // gradients: like a bad ALU feeding the all-reduce, nobody's local
    // values stand out, and only the global ones go wrong.
    if (sdc) {
      torch::Tensor g = store.GradsView();
      sdc->Corrupt(g);  // silent: no log line, no flag
    }
    const auto t_bwd = Clock::now();
    if (inject == "hang-collective") BULWARK_RETURN_IF_ERROR(comm.RecvNeverSent());

    // ---- average gradients (and the loss) across data-parallel ranks
    if (W > 1) {
      BULWARK_RETURN_IF_ERROR(comm.AllReduceSum(buckets));
      store.grads().div_(W);
    }
    st.loss = store.LossSlot().item<double>();
    const auto t_comm = Clock::now();

    // ---- clip, update, re-assemble sharded parameters
    double grad_norm = store.GradsView().norm().item<double>();
    const std::string halt = guard.Check(st.step + 1, st.loss, grad_norm);
    if (!halt.empty()) {
      // Hold the step back: nothing applied, nothing checkpointed, so the
      // newest checkpoint is the step before it. The controller decides.
      const std::string what = "step " + std::to_string(st.step + 1) + ": " +
                               (halt == "nan" ? "non-finite loss or grad norm" : "loss or grad-norm spike") +
                               " (loss " + std::to_string(st.loss) + ", grad norm " + std::to_string(grad_norm) + ")";
      note("holding back " + what + "; not applied");
      if (!link) return Status::FailedPrecondition(what + "; stopped before applying it");
      client::StepSignal s = client::StepSignal::Halted(st.step + 1, st.loss, grad_norm, halt);
      s.local_grad_norm = local_norm;
      s.local_nonfinite = local_nonfinite;
      link->Step(s);
      // The controller decides; the agent hands this process the next
      // generation (or ends it).
      return GenerationEnd::kHalted;
    }
    guard.Remember(st.loss, grad_norm);
    const double clip = cfg.grad_clip * PoetClipRamp(cfg, st.step);
    if (clip > 0 && grad_norm > clip) store.GradsView().mul_(clip / (grad_norm + 1e-6));
    const double lr = LearningRate(st.step, cfg.steps, cfg.warmup_steps, cfg.lr, cfg.min_lr_ratio);
    const double poet_lr =
        LearningRate(st.step, cfg.steps, cfg.warmup_steps, cfg.model.poet.EffectiveLr(), cfg.min_lr_ratio);
    // The update changes what the background copy of the last step reads.
    if (mem != nullptr) BULWARK_RETURN_IF_ERROR(mem->WaitCopied());
    opt.Step(lr, st.step + 1, poet_lr, st.step + 1 - LastMerge(cfg, st.step));
    if (cfg.shard_optimizer && W > 1) BULWARK_RETURN_IF_ERROR(comm.AllGatherChunks(store.params()));

    st.step += 1;
    st.data_cursor += static_cast<uint64_t>(B) * W;

    // ---- POET: merge-then-reinitialize. Every rank merges the
    // same parameters with the same draws, so no communication is needed.
    if (poet && st.step % cfg.model.poet.merge_every == 0) {
      model->MergePoet(cfg.seed, st.step / cfg.model.poet.merge_every);
      opt.ResetPoetMoments();
    }

    // ---- in-memory checkpoint: copied during the next forward and backward
    if (mem != nullptr) BULWARK_RETURN_IF_ERROR(mem->Save(st));

    // ---- report
    const auto t_end = Clock::now();
    const auto& ms_between = ms;
    double ms = ms_between(t0, t_end);
    StepReport report{st.step, cfg.steps, st.loss, lr, grad_norm, ms, tokens_per_step * 1000.0 / ms,
                      ms_between(t0, t_fwd), ms_between(t_fwd, t_bwd), ms_between(t_bwd, t_comm),
                      ms_between(t_comm, t_end)};
    if (mem != nullptr) {
      report.ckpt_block_ms = mem->TakeBlockedMs();
      report.ckpt_copy_cpu_ms = mem->TakeCopyCpuMs();
    }
    if (cfg.step_checksum) {
      std::vector<torch::Tensor> w0;
      for (auto& [name, layer] : model->PoetLayers()) w0.push_back(layer->w0);
      report.checksum = store.Checksum(w0);
      // Only rank 0 reports steps; the others' checksums show that a backup
      // one rank wrote for another holds the same state.
      if (rank != 0) Progress::Emit({{"event", "checksum"}, {"rank", rank}, {"step", st.step}, {"checksum", report.checksum}});
    }
    progress.Step(report);
    last_fwd_ms = ms_between(t0, t_fwd);
    if (link) {
      client::StepSignal s;
      s.step = st.step;
      s.loss = st.loss;
      s.grad_norm = grad_norm;
      s.local_grad_norm = local_norm;
      s.step_ms = ms;
      s.compute_ms = ms_between(t0, t_bwd);
      s.comm_ms = ms_between(t_bwd, t_comm);
      s.local_nonfinite = local_nonfinite;
      s.observed_ms = WallMs();
      s.tokens = tokens_per_step;
      link->Step(s);
    }

    // ---- diagnostics, outside the timed step (an SVD per layer)
    if (poet && cfg.model.poet.diag_every > 0 && st.step % cfg.model.poet.diag_every == 0 && rank == 0) {
      progress.PoetDiagnostics(st.step, DiagnosePoet(model));
    }

    // ---- checkpoint
    if (cfg.ckpt_every > 0 && (st.step % cfg.ckpt_every == 0 || st.step == cfg.steps)) {
      if (link) link->Phase("checkpoint", std::max(1000.0, last_ckpt_ms), st.step);
      const auto t_ckpt = Clock::now();
      BULWARK_RETURN_IF_ERROR(SaveCheckpoint(cfg, comm, *model, store, opt, st));
      last_ckpt_ms = ms_between(t_ckpt, Clock::now());
    }
    if (cfg.stop_at > 0 && st.step >= cfg.stop_at) break;  // as if preempted
  }

  if (cfg.eval_every > 0 && st.step == cfg.steps) {
    auto val = Evaluate(cfg, comm, model, data->val, p.device);
    if (!val.ok()) return val.status();
    progress.Eval(st.step, *val);
  }
  double seconds = std::chrono::duration<double>(Clock::now() - g.began).count();
  // The checksum covers POET's W0 too: with Q reset at a merge, the
  // parameters alone would not show a difference in the merged weights.
  std::vector<torch::Tensor> state;
  for (auto& [name, layer] : model->PoetLayers()) state.push_back(layer->w0);
  progress.Done(st.step, st.loss, store.Checksum(state), seconds);
  return GenerationEnd::kFinished;
}

}  // namespace bulwark::trainer
