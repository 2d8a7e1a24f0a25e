// Elastic data parallelism (elastic.h): the step that keeps the full job's
// global batch on fewer ranks, its exact reduction, and the live state sync.
#include "trainer/step/elastic.h"
#include "trainer/step/progress.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

namespace bulwark::trainer {
namespace {

using Clock = std::chrono::steady_clock;


// The largest |g| over `grads`, +inf when any element is not finite (so
// that the all-reduced maximum says so on every rank: a NaN's place in a
// maximum depends on the order of the comparisons).
double LocalMaxAbs(const std::vector<torch::Tensor>& grads) {
  double m = 0;
  for (const auto& g : grads) {
    if (!torch::isfinite(g).all().item<bool>()) return std::numeric_limits<double>::infinity();
    if (g.numel() > 0) m = std::max(m, g.abs().max().item<double>());
  }
  return m;
}

// The exponent e at which every |g| * 2^e of `units` micro-batches sums
// within an int64: |g| <= max < 2^x, so each term is below 2^(62 - b) with
// 2^b >= units, and their sum below 2^62. The coarsest step left is
// max * 2^-(61 - b), some 2^30 times finer than a float's rounding of max.
int FixedPointExponent(double max_abs, int units) {
  if (max_abs == 0) return 0;
  int x = 0;
  std::frexp(max_abs, &x);
  int b = 0;
  while ((1 << b) < units) ++b;
  return 62 - b - x;
}

}  // namespace

std::vector<int> MicroBatchesOf(int replicas, int rank, int world) {
  std::vector<int> out;
  for (int j = rank; j < replicas; j += world) out.push_back(j);
  return out;
}

Status ExactMeanOfMicroBatches(Comm& comm, const std::vector<torch::Tensor>& grads, const std::vector<int>& index,
                               const std::vector<double>& losses, int units, torch::Tensor out, double* loss,
                               TrainProcess::SpliceVote* vote) {
  // The vote's lowest as a maximum of negatives; generations are far below
  // 2^53, so a double holds them exactly.
  auto max_abs = vote ? torch::tensor({LocalMaxAbs(grads), -static_cast<double>(vote->mine),
                                       static_cast<double>(vote->mine)}, torch::kFloat64)
                      : torch::tensor({LocalMaxAbs(grads)}, torch::kFloat64);
  std::vector<torch::Tensor> mx{max_abs};
  BULWARK_RETURN_IF_ERROR(comm.AllReduceMax(mx));
  const double global_max = max_abs[0].item<double>();
  if (vote) {
    vote->low = static_cast<int64_t>(-max_abs[1].item<double>());
    vote->high = static_cast<int64_t>(max_abs[2].item<double>());
  }
  if (!std::isfinite(global_max)) {
    // Every rank takes this branch: the guard holds the step back.
    out.fill_(std::nanf(""));
    *loss = std::nan("");
    return Status::OK();
  }
  const int e = FixedPointExponent(global_max, units);
  const double up = std::ldexp(1.0, e), down = std::ldexp(1.0, -e);
  // On the gradients' device. Scaling by a power of two is exact in double,
  // and rounding is the only loss: the same on any rank and any device, so
  // a GPU's reduction has the CPU's bits.
  auto sum = torch::zeros({out.numel()}, torch::TensorOptions().dtype(torch::kInt64).device(out.device()));
  for (const auto& g : grads) {
    sum.add_(torch::round(g.to(out.device(), torch::kFloat64).mul(up)).to(torch::kInt64));
  }
  // One slot per micro-batch, zero where another rank owns it: x + 0 = x,
  // so the all-reduced slots are the losses exactly.
  auto slots = torch::zeros({units}, torch::kFloat64);
  for (size_t i = 0; i < index.size(); ++i) slots[index[i]] = losses[i];
  std::vector<torch::Tensor> both{sum, slots};
  BULWARK_RETURN_IF_ERROR(comm.AllReduceSum(both));
  out.copy_(sum.to(torch::kFloat64).mul_(down).div_(units));
  double total = 0;
  const double* s = slots.data_ptr<double>();
  for (int j = 0; j < units; ++j) total += s[j];  // in micro-batch order
  *loss = total / units;
  return Status::OK();
}

Result<double> MeanOfValidationSlots(Comm& comm, torch::Tensor sums, torch::Tensor counts, int B, int T) {
  std::vector<torch::Tensor> v{sums, counts};
  BULWARK_RETURN_IF_ERROR(comm.AllReduceSum(v));
  double sum = 0, count = 0;
  const double *s = sums.data_ptr<double>(), *c = counts.data_ptr<double>();
  for (int64_t k = 0; k < sums.numel(); ++k) {
    sum += s[k];
    count += c[k];
  }
  if (count == 0) {
    return Status::InvalidArgument("the validation split is smaller than one batch of " + std::to_string(B) + " x " +
                                   std::to_string(T) + " tokens; lower --batch-size or --eval-batches");
  }
  return sum / count;
}

MicroBatchShare::MicroBatchShare(int units, int64_t params, int who, int width, const std::vector<int>& healing)
    : units_(units), params_(params), healing_(!healing.empty()) {
  std::vector<int> computing;
  for (int r = 0; r < width; ++r) {
    if (std::find(healing.begin(), healing.end(), r) == healing.end()) computing.push_back(r);
  }
  const auto me = std::find(computing.begin(), computing.end(), who);
  Assign(me == computing.end() ? std::vector<int>{}
                               : MicroBatchesOf(units_, static_cast<int>(me - computing.begin()),
                                                static_cast<int>(computing.size())));
}

void MicroBatchShare::Assign(std::vector<int> mine) {
  mine_ = std::move(mine);
  aside_.clear();
  aside_.resize(mine_.empty() ? 0 : mine_.size() - 1);  // allocated beside the first gradients (Computed)
  losses_.assign(mine_.size(), 0.0);
}

void MicroBatchShare::Computed(size_t i, const torch::Tensor& grads, double loss) {
  losses_[i] = loss;
  if (i + 1 >= mine_.size()) return;
  if (!aside_[i].defined()) aside_[i] = torch::empty({params_}, grads.options());
  aside_[i].copy_(grads);
}

// Read in place: the sum is written back only after every input is read.
Status MicroBatchShare::Reduce(Comm& comm, const torch::Tensor& last, std::optional<double> last_loss,
                               torch::Tensor out, double* loss, TrainProcess::SpliceVote* vote) {
  std::vector<torch::Tensor> grads = aside_;
  std::vector<double> losses = losses_;
  if (!mine_.empty()) {
    grads.push_back(last);
    if (last_loss) losses.back() = *last_loss;
  }
  return ExactMeanOfMicroBatches(comm, grads, mine_, losses, units_, out, loss, vote);
}

bool MicroBatchShare::AfterStep(int who, int width) {
  if (!healing_) return false;
  healing_ = false;
  Assign(MicroBatchesOf(units_, who, width));
  return true;
}

namespace {

// Every rank runs the whole model on its micro-batches of the global batch
// (elastic.h): replicas x --micro-batches of them, so that a lost replica's
// share spreads over several survivors instead of doubling one's. The last micro-batch's gradient and loss stay in the store,
// where the driver's test hooks and own-norm read them; earlier ones are
// copied aside (only when the job runs below full width).
class ElasticStep final : public StepLayout {
 public:
  // `healing`: ranks that receive their state while the others compute the
  // generation's first step (SyncLiveState); they take no micro-batch of it.
  ElasticStep(TrainProcess& p, Comm& comm, const std::vector<int>& healing)
      : p_(p), comm_(comm), store_(*p.store), replicas_(p.cfg.elastic_replicas),
        unit_(p.cfg.batch_size / p.cfg.micro_batches),
        share_(replicas_ * p.cfg.micro_batches, store_.num_params(), comm.rank(), comm.world_size(), healing) {
    const int T = p.cfg.model.context;
    idx_ = torch::empty({unit_, T}, torch::kInt64);
    targets_ = torch::empty({unit_, T}, torch::kInt64);
  }

  Status ForwardBackward(uint64_t cursor, StepTimes* t) override {
    const std::vector<int>& mine = share_.mine();
    if (mine.empty()) {  // healing: the others compute this step
      store_.ZeroGrad();
      store_.LossSlot().fill_(0.0f);
      t->shares = 0;
      return Status::OK();
    }
    for (size_t i = 0; i < mine.size(); ++i) {
      const auto t0 = Clock::now();
      store_.ZeroGrad();
      MakeBatch(p_.data.train, *p_.sampler, cursor + static_cast<uint64_t>(mine[i]) * unit_, unit_,
                p_.cfg.model.context, idx_, targets_);
      auto loss = p_.model->Loss(OnDevice(idx_, p_.device), OnDevice(targets_, p_.device));
      const auto t_fwd = Clock::now();
      loss.backward();
      share_.Computed(i, store_.GradsView(), loss.item<float>());
      t->forward_ms += Ms(t0, t_fwd);
      t->backward_ms += Ms(t_fwd, Clock::now());
    }
    store_.LossSlot().fill_(static_cast<float>(share_.last_loss()));
    // At full width a rank computes micro_batches units: that is one share.
    t->shares = std::max(1, static_cast<int>(mine.size()) / p_.cfg.micro_batches);
    return Status::OK();
  }

  [[noreturn]] void SpinInCompute() override {
    torch::NoGradGuard no_grad;
    MakeBatch(p_.data.train, *p_.sampler, static_cast<uint64_t>(share_.empty() ? 0 : share_.mine()[0]) * unit_, unit_,
              p_.cfg.model.context, idx_, targets_);
    const torch::Tensor x = OnDevice(idx_, p_.device), y = OnDevice(targets_, p_.device);
    for (;;) p_.model->Loss(x, y);
  }

  Status Reduce(double* loss, double* grad_norm) override {
    // A live peer's state on its way to a healing rank (SyncLiveState)
    // must have left before the step's reduction meets that rank.
    BULWARK_RETURN_IF_ERROR(comm_.WaitSends());
    // The store's micro-batch as the hooks left it (a NaN, a spike, SDC).
    BULWARK_RETURN_IF_ERROR(share_.Reduce(comm_, store_.GradsView(), store_.LossSlot().item<double>(),
                                          store_.GradsView(), loss, &p_.vote));
    *grad_norm = store_.GradsView().norm().item<double>();
    if (p_.cfg.shard_optimizer) p_.zero.Hold(store_, *p_.opt);
    return Status::OK();
  }

  // ZeRO-1: the backup exchange and the parameters' all-gather, or the
  // step rolled back (elastic_zero.h).
  Status AfterUpdate() override {
    if (p_.cfg.shard_optimizer) BULWARK_RETURN_IF_ERROR(p_.zero.AfterUpdate(comm_, store_, *p_.opt));
    share_.AfterStep(comm_.rank(), comm_.world_size());
    return Status::OK();
  }

  // The first eval_batches x N validation batches, batch i*N + j computed
  // by the rank that owns micro-batch j, summed in slot order.
  Result<double> Evaluate() override {
    torch::NoGradGuard no_grad;
    const int B = p_.cfg.batch_size, T = p_.cfg.model.context, n = p_.cfg.eval_batches * replicas_;
    const uint64_t n_samples = (p_.data.val.size() - 1) / T;
    auto sums = torch::zeros({n}, torch::kFloat64), counts = torch::zeros({n}, torch::kFloat64);
    auto idx = torch::empty({B, T}, torch::kInt64), tgt = torch::empty({B, T}, torch::kInt64);
    const std::vector<int> replicas = MicroBatchesOf(replicas_, comm_.rank(), comm_.world_size());
    for (int i = 0; i < p_.cfg.eval_batches; ++i) {
      for (int j : replicas) {
        const uint64_t first = static_cast<uint64_t>(i * replicas_ + j) * B;
        if (first + B > n_samples) continue;
        MakeValBatch(p_.data.val, first, B, T, idx, tgt);
        sums[i * replicas_ + j] = p_.model->Loss(OnDevice(idx, p_.device), OnDevice(tgt, p_.device)).item<double>();
        counts[i * replicas_ + j] = 1.0;
      }
    }
    return MeanOfValidationSlots(comm_, sums, counts, B, T);
  }

  Result<std::string> Checksum() override { return StateChecksum(p_.model, store_); }

  uint64_t SamplesPerStep() const override { return static_cast<uint64_t>(p_.cfg.batch_size) * replicas_; }
  bool RanksComparable() const override { return true; }

 private:
  TrainProcess& p_;
  Comm& comm_;
  ParamStore& store_;
  const int replicas_;
  const int unit_;  // samples in one micro-batch
  MicroBatchShare share_;
  torch::Tensor idx_, targets_;
};

// The state a live peer sends: parameters, optimizer moments, the model's
// buffers (POET's W0 changes at merges), the generator, and the counters,
// in this order, each with its own tag.
std::vector<torch::Tensor> StateTensors(TrainProcess& p, const TrainState& st, uint64_t timeline) {
  // ZeRO-1 moments are re-cut from their parts instead (elastic_zero.h).
  std::vector<torch::Tensor> out = {p.store->params()};
  if (!p.cfg.shard_optimizer) out.insert(out.end(), {p.opt->m(), p.opt->v()});
  for (auto& b : p.model->named_buffers()) out.push_back(b.value());
  out.push_back(at::detail::getDefaultCPUGenerator().get_state());
  out.push_back(torch::tensor({st.step, static_cast<int64_t>(st.data_cursor), static_cast<int64_t>(timeline)},
                              torch::kInt64));
  out.push_back(torch::tensor({st.loss}, torch::kFloat64));
  return out;
}
constexpr int kStateTag = 1 << 20;

// The donor starts sending a copy of its state to each healing rank and
// goes on: the sends complete while it computes (ElasticStep::Reduce waits
// for them before the reduction that the healing ranks join).
Status SendState(Comm& comm, TrainProcess& p, const TrainState& st, uint64_t timeline, const std::vector<int>& to) {
  std::vector<torch::Tensor> state = StateTensors(p, st, timeline);
  for (torch::Tensor& t : state) t = t.clone();  // the live tensors change with the next step
  for (int dst : to) {
    for (size_t i = 0; i < state.size(); ++i) {
      BULWARK_RETURN_IF_ERROR(comm.Send(state[i], dst, kStateTag + static_cast<int>(i)));
    }
  }
  return Status::OK();
}

// A healing rank receives the donor's state into its own.
Status ReceiveState(Comm& comm, TrainProcess& p, int donor, TrainState* st, uint64_t* timeline) {
  std::vector<torch::Tensor> state = StateTensors(p, *st, *timeline);
  for (size_t i = 0; i < state.size(); ++i) {
    BULWARK_RETURN_IF_ERROR(comm.Recv(state[i], donor, kStateTag + static_cast<int>(i)));
  }
  const size_t n = state.size();
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  gen.set_state(state[n - 3]);
  const torch::Tensor& counters = state[n - 2];
  st->step = counters[0].item<int64_t>();
  st->data_cursor = static_cast<uint64_t>(counters[1].item<int64_t>());
  *timeline = static_cast<uint64_t>(counters[2].item<int64_t>());
  st->loss = state[n - 1].item<double>();
  return Status::OK();
}

}  // namespace

std::unique_ptr<StepLayout> MakeElasticStep(TrainProcess& p, Comm& comm, const std::vector<int>& healing) {
  return std::make_unique<ElasticStep>(p, comm, healing);
}

Result<LiveSync> SyncLiveState(Comm& comm, TrainProcess& p, MemoryCheckpoint* mem, TrainState* st) {
  const auto t0 = Clock::now();
  const int W = comm.world_size(), rank = comm.rank();
  const int64_t mine = p.live ? p.live->step : -1;
  // The newest and the oldest live step, in one all-reduce of maxima.
  auto range = torch::tensor({mine, -mine}, torch::kInt64);
  std::vector<torch::Tensor> v{range};
  BULWARK_RETURN_IF_ERROR(comm.AllReduceMax(v));
  LiveSync out;
  out.step = range[0].item<int64_t>();
  if (out.step < 0) return out;  // nobody is live: a cold start or a whole-job restart
  out.synced = true;
  uint64_t timeline = p.live_timeline;
  if (mine == out.step) *st = *p.live;
  if (-range[1].item<int64_t>() != out.step) {
    // Someone is behind: which ranks, in one all-reduce. Each takes the
    // state from its ring predecessor: a live one sends its own and goes on
    // to the step, a healing one passes on what it received. Only ring
    // neighbours' links carry it, so a generation formed from a plan (which
    // names no one else) heals too, and no rank sends more than one copy.
    auto behind = torch::zeros({W}, torch::kInt64);
    if (mine != out.step) behind[rank] = 1;
    std::vector<torch::Tensor> b{behind};
    BULWARK_RETURN_IF_ERROR(comm.AllReduceMax(b));
    for (int r = 0; r < W; ++r) {
      if (behind[r].item<int64_t>() != 0) {
        out.healing.push_back(r);
      } else if (out.donor < 0) {
        out.donor = r;  // every copy is this live state: name it as the source
      }
    }
    out.received = mine != out.step;
    const int pred = (rank + W - 1) % W, succ = (rank + 1) % W;
    if (out.received) BULWARK_RETURN_IF_ERROR(ReceiveState(comm, p, pred, st, &timeline));
    if (behind[succ].item<int64_t>() != 0) {
      BULWARK_RETURN_IF_ERROR(SendState(comm, p, *st, timeline, {succ}));
    }
  }
  // Nothing is abandoned: the copies taken from here on continue the
  // donor's timeline (memory_checkpoint.h).
  if (mem != nullptr) mem->ContinueTimeline(timeline);
  p.store->ZeroGrad();
  out.ms = Ms(t0, Clock::now());
  return out;
}

}  // namespace bulwark::trainer
