// The step driver (step_driver.h): restore, then the step loop that every
// layout shares. Read top to bottom; the layout's calls are marked.
#include "trainer/step/step_driver.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>

#include "common/spike_rule.h"
#include "trainer/model/simd.h"
#include "trainer/step/progress.h"

namespace bulwark::trainer {
namespace {

using Clock = TrainClock;



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

// A step is held back, not applied, when its loss or grad norm is non-finite
// or (with a spike rule from the agent) a spike by the controller's own rule
// and thresholds (common/spike_rule.h): the controller then decides, and the
// newest checkpoint is still the step before.
class AnomalyGuard {
 public:
  AnomalyGuard() {
    if (const char* r = std::getenv(rank_client::kSpikeRuleEnv)) rule_ = SpikeRule::Decode(r);
    if (!rule_) {
      if (const char* f = std::getenv(rank_client::kSpikeFactorEnv); f && std::atof(f) > 1) {
        rule_ = SpikeRule();  // an agent that sends the factor alone: the default window
        rule_->factor = std::atof(f);
      }
    }
    if (rule_) loss_ = norm_ = SpikeHistory(rule_->window);
    if (const char* a = std::getenv(rank_client::kAcceptStepEnv)) accept_ = std::atoll(a);
  }
  // "" to apply the step, else "nan" or "spike".
  std::string Check(int64_t step, double loss, double grad_norm) const {
    if (!std::isfinite(loss) || !std::isfinite(grad_norm)) return "nan";
    if (!rule_ || step == accept_) return "";
    return loss_.Spike(loss, *rule_) || norm_.Spike(grad_norm, *rule_) ? "spike" : "";
  }
  void Remember(double loss, double grad_norm) {
    loss_.Add(loss);
    norm_.Add(grad_norm);
  }

 private:
  std::optional<SpikeRule> rule_;
  int64_t accept_ = -1;
  SpikeHistory loss_, norm_;
};

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

std::string StateChecksum(Transformer& model, ParamStore& store) {
  std::vector<torch::Tensor> w0;
  for (auto& [name, layer] : model->PoetLayers()) w0.push_back(layer->w0);
  return store.Checksum(w0);
}

void StepDriver::Note(const std::string& s) {
  if (world.rank() == 0) {
    progress.Note(s);
  } else {
    std::fprintf(stderr, "rank %d: %s\n", world.rank(), s.c_str());
    std::fflush(stderr);
  }
}

Result<bool> StepDriver::Restore(TrainState* st) {
  const auto t0 = Clock::now();
  // Any restore starts from a clean slate: a generation run in place must
  // not keep what the failed one left in the buffers.
  store.ZeroGrad();
  // A digest of one stage would read as the model's: only whole models say.
  const bool whole = pp_size == 1;
  if (mem != nullptr) {
    // The fastest copies first: this machine's memory, a backup peer's,
    // durable storage; the disk checkpoints below are the last resort.
    auto outcome = mem->Restore(st);
    if (!outcome.ok()) return outcome.status();
    if (*outcome) {
      const RestoreOutcome& o = **outcome;
      if (world.rank() == 0) {
        nlohmann::json e = {{"event", "restore"}, {"step", o.step},          {"source", o.source},
                            {"sources", o.sources}, {"newest_step", o.newest_step}, {"ms", o.ms}};
        if (whole) e["checksum"] = StateChecksum(model, store);
        Progress::Emit(e);
      }
      progress.Note("restored step " + std::to_string(o.step) + " from " + o.source + " in " +
                    std::to_string(static_cast<int>(o.ms)) + " ms");
      return true;
    }
  }
  if (!cfg.resume) return false;
  auto loaded = LoadCheckpoint(cfg, world, *model, store, opt, [&](const std::string& s) { Note(s); }, pp_size);
  if (!loaded.ok()) return loaded.status();
  if (!*loaded) {
    // None at all (a first launch), or only rejected ones under
    // --allow-fresh-start; LoadCheckpoint refuses the rest.
    progress.Note("no valid checkpoint in " + cfg.ckpt_dir + "; starting from step 0");
    return false;
  }
  *st = **loaded;
  progress.Note("resumed from " + cfg.ckpt_dir + " at step " + std::to_string(st->step));
  if (mem != nullptr) mem->ResumedFromDisk(st->step);
  if (world.rank() == 0) {
    Progress::Emit({{"event", "restore"}, {"step", st->step}, {"source", "disk"}, {"newest_step", st->step},
                    {"ms", Ms(t0, Clock::now())}});
  }
  return true;
}

Result<GenerationEnd> StepDriver::Run(StepLayout& layout, TrainState& st, Clock::time_point began) {
  const int rank = world.rank();
  const bool poet = cfg.model.poet.enabled;
  const int64_t tokens_per_step = static_cast<int64_t>(layout.SamplesPerStep()) * cfg.model.context;
  // Fresh per generation, as in a new process: its history and the
  // agent's accepted step are the generation's.
  AnomalyGuard guard;
  double last_fwd_ms = 0, last_ckpt_ms = 0;
  // The device time of each step's compute, which the fail-slow detector
  // compares machines by (pace.h).
  StepCompute compute(store.GradsView().is_cpu());

  // --------------------------------------------------------------------------
  // The loop. `st.step` counts completed steps; step s+1 is being computed.
  while (st.step < cfg.steps) {
    if (cfg.eval_every > 0 && st.step % cfg.eval_every == 0) {
      // Not a step: the hang detector gets the phase's own allowance.
      if (link) link->Phase("eval", std::max(1000.0, 2 * cfg.eval_batches * last_fwd_ms), st.step);
      auto val = layout.Evaluate();  // layout
      if (!val.ok()) return val.status();
      progress.Eval(st.step, *val);
    }
    const auto t0 = Clock::now();
    compute.Begin();

    // ---- the agent's test hooks (client/rank_link.h): one non-blocking
    // check a step. Silent data corruption stays on once injected
    // ("sdc-nan:R" / "sdc-drift:R").
    std::string inject;
    if (sdc_file) sdc_file->Poll(sdc);  // the machine's emulated hardware (sdc.h)
    if (pace_file) pace_file->Poll();   // and its pace (pace.h)
    if (link) inject = link->PollInject().value_or("");
    // This step's reduction carries the splice this rank holds (train_loop.h).
    if (vote != nullptr && link) vote->mine = link->splice() ? link->splice()->generation : 0;
    if (inject.rfind("sdc-", 0) == 0) sdc = Sdc::Parse(inject.substr(4));
    if (inject == "yield" || inject == "abort") {
      // A new generation comes while this one trains (an elastic job grows
      // back): stop between steps, the state whole, and wait for it. An
      // abort (the agent stopped waiting for the yield; RankLink::TakeAbort)
      // met between steps is the same.
      if (mem != nullptr) BULWARK_RETURN_IF_ERROR(mem->WaitCopied());
      return GenerationEnd::kYielded;
    }
    if (inject == "hang-compute") layout.SpinInCompute();  // a kernel that never ends

    // ---- forward and backward on this rank's share of the global batch
    StepTimes times;
    BULWARK_RETURN_IF_ERROR(layout.ForwardBackward(st.data_cursor, &times));  // layout
    if (inject == "nan") store.GradsView()[0].fill_(std::nanf(""));  // a bad GPU's output
    if (inject == "loss-spike") store.LossSlot().mul_(50);
    // This rank's own gradients before the reduction: after it, one rank's
    // NaN is every rank's, and only this says whose it was.
    const double own_norm = link ? store.GradsView().norm().item<double>() : 0.0;
    const bool local_nonfinite = link && (!std::isfinite(own_norm) || !std::isfinite(store.LossSlot().item<double>()));
    // Silent data corruption strikes after the rank looked at its own
    // gradients: like a bad ALU feeding the all-reduce, nobody's local
    // values stand out, and only the global ones go wrong.
    if (sdc) {
      torch::Tensor g = store.GradsView();
      sdc->Corrupt(g);  // silent: no log line, no flag
    }
    // A throttled machine's compute takes longer (pace.h).
    if (pace_file) compute.Stretch(pace_file->factor(), times.wait_ms);
    const double device_ms = compute.Ms(times.wait_ms);
    const auto t_bwd = Clock::now();
    if (inject == "hang-collective") BULWARK_RETURN_IF_ERROR(world.RecvNeverSent());

    // ---- average gradients (and the loss) across the job
    double grad_norm = 0;
    BULWARK_RETURN_IF_ERROR(layout.Reduce(&st.loss, &grad_norm));  // layout
    const auto t_comm = Clock::now();
    const double local_norm = layout.RanksComparable() ? own_norm : grad_norm;

    // ---- hold a bad step back: nothing applied, nothing checkpointed, so
    // the newest checkpoint is the step before it. The controller decides.
    const std::string halt = guard.Check(st.step + 1, st.loss, grad_norm);
    if (!halt.empty()) {
      const std::string what = "step " + std::to_string(st.step + 1) + ": " +
                               (halt == "nan" ? "non-finite loss or grad norm" : "loss or grad-norm spike") +
                               " (loss " + std::to_string(st.loss) + ", grad norm " + std::to_string(grad_norm) + ")";
      Note("holding back " + what + "; not applied");
      if (!link) return Status::FailedPrecondition(what + "; stopped before applying it");
      rank_client::StepSignal s = rank_client::StepSignal::Halted(st.step + 1, st.loss, grad_norm, halt);
      s.local_grad_norm = local_norm;
      s.local_nonfinite = local_nonfinite;
      link->Step(s);
      // The copy of the step before must be whole for the restart.
      if (mem != nullptr) BULWARK_RETURN_IF_ERROR(mem->WaitCopied());
      return GenerationEnd::kHalted;
    }
    guard.Remember(st.loss, grad_norm);

    // ---- clip, update, re-assemble sharded parameters
    const double clip = cfg.grad_clip * PoetClipRamp(cfg, st.step);
    if (clip > 0 && grad_norm > clip) store.GradsView().mul_(clip / (grad_norm + 1e-6));
    const double lr = LearningRate(st.step, cfg.steps, cfg.warmup_steps, cfg.lr, cfg.min_lr_ratio);
    const double poet_lr =
        LearningRate(st.step, cfg.steps, cfg.warmup_steps, cfg.model.poet.EffectiveLr(), cfg.min_lr_ratio);
    // The update changes what the background copy of the last step reads.
    if (mem != nullptr) BULWARK_RETURN_IF_ERROR(mem->WaitCopied());
    opt.Step(lr, st.step + 1, poet_lr, st.step + 1 - LastMerge(cfg, st.step));
    BULWARK_RETURN_IF_ERROR(layout.AfterUpdate());  // layout
    st.step += 1;
    st.data_cursor += layout.SamplesPerStep();

    // ---- POET: merge-then-reinitialize. Every rank merges the same
    // parameters with the same draws, so no communication is needed.
    if (poet && st.step % cfg.model.poet.merge_every == 0) {
      model->MergePoet(cfg.seed, st.step / cfg.model.poet.merge_every);
      opt.ResetPoetMoments();
    }

    // ---- report: forward/backward are compute plus waits for neighbours
    const auto t_end = Clock::now();
    const double ms = Ms(t0, t_end);
    StepReport report;
    report.step = st.step;
    report.total = cfg.steps;
    report.loss = st.loss;
    report.lr = lr;
    report.grad_norm = grad_norm;
    report.step_ms = ms;
    report.tokens_per_s = tokens_per_step * 1000.0 / ms;
    report.forward_ms = times.forward_ms;
    report.backward_ms = times.backward_ms;
    report.comm_ms = Ms(t_bwd, t_comm) + times.wait_ms;
    report.optimizer_ms = Ms(t_comm, t_end);
    if (mem != nullptr) {
      report.ckpt_block_ms = mem->TakeBlockedMs();
      report.ckpt_copy_cpu_ms = mem->TakeCopyCpuMs();
    }
    if (cfg.step_checksum) {
      report.checksum = StateChecksum(model, store);
      // Only rank 0 reports steps; the others' checksums show that a backup
      // one rank wrote for another holds the same state.
      if (rank != 0) Progress::Emit({{"event", "checksum"}, {"rank", rank}, {"step", st.step}, {"checksum", report.checksum}});
    }
    progress.Step(report);
    last_fwd_ms = times.forward_ms;

    // ---- in-memory checkpoint: copied during the next forward and backward.
    // After the step's line, so a restore never names a step its log lacks
    // (a rank killed between the two left a copy of a step it never printed).
    if (mem != nullptr) BULWARK_RETURN_IF_ERROR(mem->Save(st));
    if (link) {
      // Compute is this rank's own work: waits for its neighbours are
      // communication (a slow neighbour shows in its own compute time).
      rank_client::StepSignal s;
      s.step = st.step;
      s.loss = st.loss;
      s.grad_norm = grad_norm;
      s.local_grad_norm = local_norm;
      s.step_ms = ms;
      s.compute_ms = std::max(0.0, Ms(t0, t_bwd) - times.wait_ms) / std::max(1, times.shares);
      s.device_ms = std::max(0.0, device_ms) / std::max(1, times.shares);
      s.comm_ms = Ms(t_bwd, t_comm) + times.wait_ms;
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
      BULWARK_RETURN_IF_ERROR(SaveCheckpoint(cfg, world, *model, store, opt, st, pp_size));
      last_ckpt_ms = Ms(t_ckpt, Clock::now());
    }
    if (cfg.stop_at > 0 && st.step >= cfg.stop_at) break;  // as if preempted
    // Every rank held the same next generation at this step's reduction, so
    // every rank leaves here, after the same whole step (train_loop.h).
    if (vote != nullptr && vote->Agreed() && st.step < cfg.steps) {
      if (mem != nullptr) BULWARK_RETURN_IF_ERROR(mem->WaitCopied());
      return GenerationEnd::kSpliced;
    }
  }

  if (cfg.eval_every > 0 && st.step == cfg.steps) {
    auto val = layout.Evaluate();
    if (!val.ok()) return val.status();
    progress.Eval(st.step, *val);
  }
  auto checksum = layout.Checksum();
  if (!checksum.ok()) return checksum.status();
  progress.Done(st.step, st.loss, *checksum, std::chrono::duration<double>(Clock::now() - began).count());
  return GenerationEnd::kFinished;
}

}  // namespace bulwark::trainer
