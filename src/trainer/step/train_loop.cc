// One generation of data-parallel training: its setup, and the
// data-parallel step that the step driver (step_driver.h) runs: forward and
// backward of the rank's slice of the global batch -> bucketed all-reduce.
#include "trainer/step/train_loop.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <thread>

#include <unistd.h>

#include "rank_client/rank_link.h"
#include "trainer/optim/adamw.h"
#include "trainer/state/checkpoint.h"
#include "trainer/comm/dist.h"
#include "trainer/step/elastic.h"
#include "trainer/step/elastic_pipeline.h"
#include "trainer/state/memory_checkpoint.h"
#include "trainer/model/model.h"
#include "trainer/model/params.h"
#include "trainer/step/progress.h"
#include "trainer/data/sampler.h"
#include "trainer/diag/sdc.h"
#include "trainer/model/simd.h"
#include "trainer/step/step_driver.h"
#include "trainer/data/tokens.h"

namespace bulwark::trainer {

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

void MakeValBatch(const std::vector<uint16_t>& val, uint64_t first, int B, int T, torch::Tensor& idx,
                  torch::Tensor& targets) {
  auto* x = idx.data_ptr<int64_t>();
  auto* y = targets.data_ptr<int64_t>();
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      x[b * T + t] = val[(first + b) * T + t];
      y[b * T + t] = val[(first + b) * T + t + 1];
    }
}

torch::Tensor OnDevice(const torch::Tensor& t, const torch::Device& device) {
  return device.is_cpu() ? t : t.to(device);
}

namespace {

using Clock = std::chrono::steady_clock;


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
    MakeValBatch(val, first, B, T, idx, tgt);
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

// The data-parallel step: every rank runs the whole model on its slice of
// the global batch, then the gradients are all-reduced in buckets.
class DataParallelStep final : public StepLayout {
 public:
  DataParallelStep(TrainProcess& p, Comm& comm) : p_(p), comm_(comm), store_(*p.store) {
    const int B = p.cfg.batch_size, T = p.cfg.model.context;
    // A device rank builds batches in pinned host memory and copies them
    // without waiting (the step's one wait, Reduce reading the loss and
    // norm, comes after the copy, so the host never rewrites a batch still
    // being copied). The CPU's batches are used where they are.
    const bool device = !p.device.is_cpu();
    const auto host = torch::TensorOptions().dtype(torch::kInt64).pinned_memory(device);
    idx_ = torch::empty({B, T}, host);
    targets_ = torch::empty({B, T}, host);
    if (device) {
      x_ = torch::empty({B, T}, torch::TensorOptions().dtype(torch::kInt64).device(p.device));
      y_ = torch::empty({B, T}, torch::TensorOptions().dtype(torch::kInt64).device(p.device));
    }
    // Gradient buckets: slices of the flat gradient buffer; the loss rides
    // in the last one (params.h).
    const int64_t bucket = std::max<int64_t>(1, static_cast<int64_t>(p.cfg.bucket_mb * (1 << 20) / sizeof(float)));
    for (int64_t b = 0; b < store_.grads().numel(); b += bucket) {
      buckets_.push_back(store_.grads().narrow(0, b, std::min(bucket, store_.grads().numel() - b)));
    }
  }

  Status ForwardBackward(uint64_t cursor, StepTimes* t) override {
    const auto t0 = Clock::now();
    const int B = p_.cfg.batch_size;
    store_.ZeroGrad();
    MakeBatch(p_.data.train, *p_.sampler, cursor + static_cast<uint64_t>(comm_.rank()) * B, B, p_.cfg.model.context,
              idx_, targets_);
    if (p_.device.is_cpu()) {
      x_ = idx_;
      y_ = targets_;
    } else {
      x_.copy_(idx_, /*non_blocking=*/true);
      y_.copy_(targets_, /*non_blocking=*/true);
    }
    auto loss = p_.model->Loss(x_, y_);
    const auto t_fwd = Clock::now();
    loss.backward();
    // Stays on the device: the loss rides to the host with the norm (Reduce).
    {
      torch::NoGradGuard no_grad;
      store_.LossSlot().copy_(loss.detach());
    }
    t->forward_ms = Ms(t0, t_fwd);
    t->backward_ms = Ms(t_fwd, Clock::now());
    return Status::OK();
  }

  [[noreturn]] void SpinInCompute() override {
    torch::NoGradGuard no_grad;
    const int B = p_.cfg.batch_size;
    MakeBatch(p_.data.train, *p_.sampler, static_cast<uint64_t>(comm_.rank()) * B, B, p_.cfg.model.context, idx_,
              targets_);
    const torch::Tensor x = OnDevice(idx_, p_.device), y = OnDevice(targets_, p_.device);
    for (;;) p_.model->Loss(x, y);
  }

  Status Reduce(double* loss, double* grad_norm) override {
    if (comm_.world_size() > 1) {
      BULWARK_RETURN_IF_ERROR(comm_.AllReduceSum(buckets_));
      store_.grads().div_(comm_.world_size());
    }
    // One read from the device for both (a GPU rank's one wait a step).
    const auto both = torch::cat({store_.LossSlot(), store_.GradsView().norm().reshape({1})}).to(torch::kCPU);
    *loss = both[0].item<double>();
    *grad_norm = both[1].item<double>();
    return Status::OK();
  }

  Status AfterUpdate() override {
    if (p_.cfg.shard_optimizer && comm_.world_size() > 1) return comm_.AllGatherChunks(store_.params());
    return Status::OK();
  }

  Result<double> Evaluate() override { return trainer::Evaluate(p_.cfg, comm_, p_.model, p_.data.val, p_.device); }

  Result<std::string> Checksum() override { return StateChecksum(p_.model, store_); }

  uint64_t SamplesPerStep() const override { return static_cast<uint64_t>(p_.cfg.batch_size) * comm_.world_size(); }
  bool RanksComparable() const override { return true; }

 private:
  TrainProcess& p_;
  Comm& comm_;
  ParamStore& store_;
  torch::Tensor idx_, targets_, x_, y_;
  std::vector<torch::Tensor> buckets_;
};

// A survivor whose peer hangs (a frozen machine) waits inside a ring
// collective for data that never comes, and the agent that has the next
// generation for it stops it when it does not yield: its live state, the
// only in-memory copy of use at another width, went with it. The agent's
// abort ends the collective instead, and the rank rejoins in place.
// Elastic ZeRO-1: this generation's part of the moments of `step`, re-cut
// from the parts the ranks hold (elastic_zero.h). `own`: this process's
// optimizer of its last generation, or null.
Status RecutMoments(TrainProcess& p, Comm& comm, const AdamW* own, int64_t step, StepDriver& driver) {
  const TrainConfig& cfg = p.cfg;
  const bool merged = cfg.model.poet.enabled && step > 0 && step % cfg.model.poet.merge_every == 0;
  auto cut = p.zero.RecutFor(comm, *p.store, own, p.live ? p.live->step : -1, step, merged, *p.opt);
  if (!cut.ok()) return cut.status();
  if (cut->moved && comm.rank() == 0) {
    driver.Note("ZeRO-1: re-cut the optimizer state of step " + std::to_string(step) + " for " +
                std::to_string(comm.world_size()) + " ranks in " + std::to_string(cut->ms).substr(0, 5) + " ms");
  }
  return Status::OK();
}

void HearAgentInCollectives(TrainProcess& p) {
  if (!p.link) return;
  rank_client::RankLink* link = p.link.get();
  for (RingLinks* r : {p.ring.get(), p.stage_ring.get()}) {
    if (r != nullptr) r->InterruptOn(link->fd(), [link] { return link->TakeAbort(); });
  }
}

}  // namespace

Result<GenerationEnd> RunGeneration(TrainProcess& p, Comm& comm, const GenerationStart& g) {
  const TrainConfig& cfg = p.cfg;
  const int W = comm.world_size(), rank = comm.rank();
  Progress progress(cfg.log_format == "json", rank == 0, cfg.log_every);
  HearAgentInCollectives(p);

  // Padded to the world size even unsharded: in-memory checkpoint shards
  // split the state the way ZeRO-1 does. A job keeps its world size; an
  // elastic one is not padded (dist.h's ChunkOf splits it at any width). A
  // pipeline's store holds its stage (pipeline.h).
  const int elastic = cfg.elastic_replicas;
  std::optional<PipelinePlace> place;
  if (UsesPipeline(cfg)) {
    auto placed = PlaceInPipeline(p, comm);
    if (!placed.ok()) return placed.status();
    place = std::move(*placed);
  }  // a width past --elastic-replicas was refused before the rendezvous (CheckWorld)
  if (!p.store) {
    // Elastic: one length for every width (ChunkOf splits it unevenly), so
    // a reduction over the whole buffer adds the same zeros at any width.
    p.store = std::make_unique<ParamStore>(*p.model, elastic > 0 ? 1 : W);
    if (cfg.model.bf16) p.model->UseBf16Shadow(p.store->params());
  }
  ParamStore& store = *p.store;
  Comm& group = place ? *place->dp : comm;  // the ranks that hold this store's parameters
  if (elastic == 0 && store.params().numel() % group.world_size() != 0) {
    return Status::FailedPrecondition("this process was set up for another world size than " + std::to_string(W));
  }
  // A new rank or width needs a new ZeRO-1 shard, its part of the group's
  // store; a whole optimizer serves any rank (and an elastic survivor keeps
  // its moments). An elastic ZeRO-1 survivor's old part goes into the
  // re-cut (elastic_zero.h).
  const bool zero = elastic > 0 && cfg.shard_optimizer;
  std::unique_ptr<AdamW> last_opt;
  const AdamW* own_part = zero ? p.opt.get() : nullptr;
  if (!p.opt || (cfg.shard_optimizer && (p.opt_rank != group.rank() || p.opt_width != group.world_size()))) {
    Span mine{0, store.num_params()};
    if (cfg.shard_optimizer) mine = ZeroRangeOf(store, group.world_size(), group.rank());
    if (zero) last_opt = std::move(p.opt);
    p.opt = std::make_unique<AdamW>(store, mine.begin, mine.end, AdamWOptions{cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay});
    p.opt_rank = group.rank();
    p.opt_width = group.world_size();
  }

  const auto t_init = Clock::now();
  StepDriver driver{cfg, comm, p.model, store, *p.opt, nullptr, p.link.get(), progress, p.sdc};
  if (p.sdc_file) driver.sdc_file = &*p.sdc_file;
  if (p.pace_file) driver.pace_file = &*p.pace_file;
  if (place) driver.pp_size = place->c.pp_size;
  // A data-parallel ring formed from the controller's plans can take a grow
  // between steps: the joiner's neighbours link to it, everyone else keeps
  // its links (docs/recovery.md). A pipeline, or a store generation, yields.
  p.vote = {};
  const char* splice = std::getenv("BULWARK_SPLICE");  // "0": grow by a yield, as before (to compare)
  if (elastic > 0 && !place && g.rendezvous == "plan" && p.link && !(splice && std::string(splice) == "0")) {
    driver.vote = &p.vote;
    p.link->OfferSplice();
  }
  auto memory = MemoryCheckpoint::Open(cfg, comm, p.model, store, *p.opt, [&](const std::string& s) { driver.Note(s); },
                                       place ? place->dp.get() : nullptr);
  if (!memory.ok()) return memory.status();
  driver.mem = memory->get();
  TrainState st;
  Result<bool> restored = false;
  std::vector<int> healing;  // elastic: ranks (pipelines: replicas) that took a live peer's state
  Status lost_part;          // elastic ZeRO-1: a part of the moments no live rank held
  if (elastic > 0) {
    // Live ranks keep their state; one behind takes it from a live peer.
    auto sync = place ? SyncPipelineLiveState(comm, *place, p, driver.mem, &st) : SyncLiveState(comm, p, driver.mem, &st);
    if (!sync.ok()) return sync.status();
    if (sync->synced) {
      if (rank == 0) {
        Progress::Emit({{"event", "restore"}, {"step", sync->step}, {"newest_step", sync->step}, {"ms", sync->ms},
                        {"source", sync->donor < 0 ? "live" : "live peer " + std::to_string(sync->donor)}});
      }
      if (sync->received) {
        driver.Note("took step " + std::to_string(sync->step) + " from live rank " + std::to_string(sync->donor) +
                    (place ? " of stage " + std::to_string(place->c.pp) : ""));
      }
      healing = sync->healing;
      restored = true;
    }
    if (zero && sync->synced) {
      lost_part = RecutMoments(p, comm, own_part, sync->step, driver);
      if (!lost_part.ok()) {
        if (lost_part.code() != Status::Code::kFailedPrecondition) return lost_part;
        driver.Note(lost_part.message() + "; restoring from the newest checkpoint instead");
        restored = false;
        healing.clear();
      }
    }
  }
  if (!*restored) restored = driver.Restore(&st);
  if (!restored.ok()) return restored.status();
  if (!lost_part.ok() && !*restored) {
    return Status::FailedPrecondition(lost_part.message() + ", and no checkpoint holds the job's state; restart the "
                                      "job from a disk checkpoint (--ckpt-dir with --resume)");
  }
  if (zero) p.zero.Begin(st.step, comm.rank(), W);
  if (g.path == "rejoin" && !*restored) {
    // This process's parameters are those of the failed generation, and no
    // copy says what they should be: only a new process starts clean.
    p.must_exit = true;
    return Status::Unavailable("rank " + std::to_string(rank) + " rejoined in place but the ranks share no "
                               "checkpoint to restore; ending so that the rank restarts in a new process");
  }
  const auto t_ready = Clock::now();
  // Where a (re)start's seconds go, for the supervisor's recovery breakdown;
  // the time from spawn to main() is the supervisor's to measure.
  nlohmann::json info = {{"data_ms", Ms(g.began, g.data_ready)}, {"rendezvous_ms", Ms(g.data_ready, g.rendezvous_done)},
                          {"init_ms", Ms(g.rendezvous_done, t_init)}, {"checkpoint_load_ms", Ms(t_init, t_ready)},
                          {"path", g.path}, {"assign_wait_ms", g.assign_wait_ms}, {"rendezvous", g.rendezvous}, {"spliced", g.spliced}, {"pid", static_cast<int64_t>(::getpid())},
                          {"params", store.num_params()}, {"world_size", W}, {"optimizer", cfg.optimizer},
                          {"poet_params", store.poet_group().end - store.poet_group().begin}, {"steps", cfg.steps},
                          {"start_step", st.step}, {"threads", p.threads}, {"shape", cfg.model.ShapeString()},
                          {"shard_optimizer", cfg.shard_optimizer}, {"precision", p.precision_reason},
                          {"device", p.device_reason}, {"dist_backend", p.backend_reason}};
  if (place) info.update(PipelineStart(cfg, *place, store));
  progress.Start(info);
  if (g.path != "rejoin") {
    progress.Note("device: " + p.device_reason + "; precision: " + p.precision_reason +
                  (p.device.is_cuda() && W > 1 ? "; gradients: " + p.backend_reason : ""));
  }
  if (place && g.path != "rejoin") progress.Note(DescribePipeline(cfg, *place));

  std::unique_ptr<StepLayout> layout;
  if (place && elastic > 0) {
    layout = MakeElasticPipelineStep(p, comm, *place, healing);
  } else if (place) {
    layout = MakePipelineStep(p, comm, *place);
  } else if (elastic > 0) {
    layout = MakeElasticStep(p, comm, healing);
  } else {
    layout = std::make_unique<DataParallelStep>(p, comm);
  }
  Result<GenerationEnd> end = driver.Run(*layout, st, g.began);
  // What the next generation of an elastic job keeps (elastic.h): the state
  // after the last step this rank applied, whatever ended this one.
  p.live = st;
  p.live_timeline = driver.mem != nullptr ? driver.mem->timeline() : 0;
  return end;
}

}  // namespace bulwark::trainer
