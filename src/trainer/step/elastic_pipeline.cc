// Elastic data parallelism over pipelines (elastic_pipeline.h): the place
// of a rank, the per-stage live sync, and the step.
#include "trainer/step/elastic_pipeline.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "trainer/step/pipeline_stage.h"
#include "trainer/step/progress.h"

namespace bulwark::trainer {
namespace {

using Clock = std::chrono::steady_clock;


// One replica's pipeline over its micro-batches of the global batch, in
// 1F1B order; each micro-batch's gradient kept apart for the exact sum.
// The last one's gradient and loss stay in the store, where the driver's
// test hooks read them (as in elastic.cc).
class ElasticPipelineStep final : public StepLayout {
 public:
  ElasticPipelineStep(TrainProcess& p, Comm& world, PipelinePlace& place, const std::vector<int>& healing)
      : p_(p), world_(world), dp_(*place.dp), c_(place.c), layers_(place.layers), store_(*p.store),
        replicas_(p.cfg.elastic_replicas), unit_(p.cfg.batch_size / p.cfg.micro_batches),
        stage_(p.model, world, place.c, place.layers, unit_, p.cfg.model.context),
        share_(replicas_ * p.cfg.micro_batches, store_.num_params(), c_.dp, c_.dp_size, healing) {
    Resize();
  }

  Status ForwardBackward(uint64_t cursor, StepTimes* t) override {
    const std::vector<int>& mine = share_.mine();
    if (mine.empty()) {  // healing: the other replicas compute this step
      store_.ZeroGrad();
      t->shares = 0;
      return Status::OK();
    }
    // At full width a replica computes micro_batches of them: one share.
    t->shares = std::max(1, static_cast<int>(mine.size()) / p_.cfg.micro_batches);
    const int T = p_.cfg.model.context;
    for (size_t i = 0; i < mine.size(); ++i) {
      torch::Tensor x = idx_.narrow(0, static_cast<int64_t>(i) * unit_, unit_);
      torch::Tensor y = targets_.narrow(0, static_cast<int64_t>(i) * unit_, unit_);
      MakeBatch(p_.data.train, *p_.sampler, cursor + static_cast<uint64_t>(mine[i]) * unit_, unit_, T, x, y);
    }
    stage_.wait_ms = 0;
    for (const PipeOp& op : schedule_) {
      const auto t0 = Clock::now();
      const int i = op.micro;
      if (op.kind == PipeOp::kForward) {
        BULWARK_RETURN_IF_ERROR(stage_.Forward(i, idx_.narrow(0, i * unit_, unit_), targets_.narrow(0, i * unit_, unit_), 1.0));
        losses_[i] = stage_.last_loss;  // the gradient comes with its backward pass
        t->forward_ms += Ms(t0, Clock::now());
        continue;
      }
      // Backward passes come in micro-batch order: the store holds one
      // micro-batch's gradient at a time.
      store_.ZeroGrad();
      BULWARK_RETURN_IF_ERROR(stage_.Backward(i));
      share_.Computed(static_cast<size_t>(i), store_.GradsView(), losses_[i]);
      t->backward_ms += Ms(t0, Clock::now());
    }
    BULWARK_RETURN_IF_ERROR(world_.WaitSends());
    store_.LossSlot().fill_(layers_.head ? share_.last_loss() : 0.0);
    t->wait_ms = stage_.wait_ms;
    return Status::OK();
  }

  [[noreturn]] void SpinInCompute() override {
    torch::NoGradGuard no_grad;
    const torch::Tensor x = OnDevice(idx_.narrow(0, 0, unit_), p_.device);
    for (;;) p_.model->Body(p_.model->Embed(x), layers_.first, layers_.last);
  }

  Status Reduce(double* loss, double* grad_norm) override {
    // A live peer's state on its way to a healing replica (over the stage's
    // group) must have left before the reduction meets it.
    BULWARK_RETURN_IF_ERROR(dp_.WaitSends());
    double stage_loss = 0;
    const std::optional<double> last_loss =
        layers_.head ? std::optional<double>(store_.LossSlot().item<double>()) : std::nullopt;
    BULWARK_RETURN_IF_ERROR(share_.Reduce(dp_, store_.GradsView(), last_loss, store_.GradsView(), &stage_loss));
    // One slot per stage, from its replica 0: x + 0 = x, so the all-reduced
    // slots are exact, and they are added here in stage order.
    auto slots = torch::zeros({2 * c_.pp_size}, torch::kFloat64);
    if (c_.dp == 0) {
      slots[2 * c_.pp] = store_.GradsView().to(torch::kFloat64).pow(2).sum();
      if (layers_.head) slots[2 * c_.pp + 1] = stage_loss;
    }
    std::vector<torch::Tensor> v{slots};
    BULWARK_RETURN_IF_ERROR(world_.AllReduceSum(v));
    const double* s = slots.data_ptr<double>();
    double squares = 0;
    for (int k = 0; k < c_.pp_size; ++k) squares += s[2 * k];
    *grad_norm = std::sqrt(squares);
    *loss = s[2 * (c_.pp_size - 1) + 1];
    return Status::OK();
  }

  Status AfterUpdate() override {
    if (share_.AfterStep(c_.dp, c_.dp_size)) Resize();
    return Status::OK();
  }

  // Validation batch i * N + j goes through the pipeline of the replica
  // that owns j; the last stage's losses are summed in slot order.
  Result<double> Evaluate() override {
    torch::NoGradGuard no_grad;
    const int B = p_.cfg.batch_size, T = p_.cfg.model.context, n = p_.cfg.eval_batches * replicas_;
    const uint64_t n_samples = (p_.data.val.size() - 1) / T;
    auto sums = torch::zeros({n}, torch::kFloat64), counts = torch::zeros({n}, torch::kFloat64);
    auto vi = torch::empty({B, T}, torch::kInt64), vt = torch::empty({B, T}, torch::kInt64);
    for (int i = 0; i < p_.cfg.eval_batches; ++i) {
      for (int j : MicroBatchesOf(replicas_, c_.dp, c_.dp_size)) {
        const int k = i * replicas_ + j;
        if (static_cast<uint64_t>(k + 1) * B > n_samples) continue;
        MakeValBatch(p_.data.val, static_cast<uint64_t>(k) * B, B, T, vi, vt);
        auto l = stage_.EvalForward(k, vi, vt, B);
        if (!l.ok()) return l.status();
        if (layers_.head) {
          sums[k] = *l;
          counts[k] = 1.0;
        }
      }
    }
    return MeanOfValidationSlots(world_, sums, counts, B, T);
  }

  Result<std::string> Checksum() override { return PipelineChecksum(world_, c_, store_); }
  uint64_t SamplesPerStep() const override { return static_cast<uint64_t>(p_.cfg.batch_size) * replicas_; }
  bool RanksComparable() const override { return false; }

 private:
  // The batches and 1F1B order of this replica's share.
  void Resize() {
    const int64_t k = static_cast<int64_t>(share_.mine().size());
    idx_ = torch::empty({std::max<int64_t>(1, k) * unit_, p_.cfg.model.context}, torch::kInt64);
    targets_ = torch::empty_like(idx_);
    losses_.assign(share_.mine().size(), 0.0);
    schedule_ = k == 0 ? std::vector<PipeOp>{} : OneFOneB(c_.pp, c_.pp_size, static_cast<int>(k));
  }

  TrainProcess& p_;
  Comm& world_;
  Comm& dp_;
  const PipelineCoords c_;
  const StageLayers layers_;
  ParamStore& store_;
  const int replicas_, unit_;
  Stage stage_;
  MicroBatchShare share_;
  std::vector<PipeOp> schedule_;
  torch::Tensor idx_, targets_;  // one slice of unit_ samples per micro-batch
  std::vector<double> losses_;   // forward losses, until each backward pass
};

}  // namespace

Result<LiveSync> SyncPipelineLiveState(Comm& world, PipelinePlace& place, TrainProcess& p, MemoryCheckpoint* mem,
                                       TrainState* st) {
  const PipelineCoords& c = place.c;
  // Each stage's newest live step, in one all-reduce of maxima.
  auto newest = torch::full({c.pp_size}, -1, torch::kInt64);
  newest[c.pp] = p.live ? p.live->step : -1;
  std::vector<torch::Tensor> v{newest};
  BULWARK_RETURN_IF_ERROR(world.AllReduceMax(v));
  const int64_t* n = newest.data_ptr<int64_t>();
  for (int s = 0; s < c.pp_size; ++s) {
    if (n[s] < 0 || n[s] != n[0]) return LiveSync{};  // no live state, or the stages disagree: restore
  }
  auto sync = SyncLiveState(*place.dp, p, mem, st);
  if (!sync.ok()) return sync.status();
  // A replica heals when any of its stages does.
  auto heal = torch::zeros({c.dp_size}, torch::kInt64);
  for (int d : sync->healing) heal[d] = 1;
  std::vector<torch::Tensor> h{heal};
  BULWARK_RETURN_IF_ERROR(world.AllReduceMax(h));
  sync->healing.clear();
  for (int d = 0; d < c.dp_size; ++d) {
    if (heal[d].item<int64_t>() != 0) sync->healing.push_back(d);
  }
  return sync;
}

std::unique_ptr<StepLayout> MakeElasticPipelineStep(TrainProcess& p, Comm& world, PipelinePlace& place,
                                                    const std::vector<int>& healing) {
  return std::make_unique<ElasticPipelineStep>(p, world, place, healing);
}

}  // namespace bulwark::trainer
