// The model and optimizer, in process, against direct formulas and libtorch's
// own implementations.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "trainer/optim/adamw.h"
#include "trainer/model/kernels.h"
#include "trainer/state/memory_checkpoint.h"
#include "trainer/model/model.h"
#include "trainer/model/params.h"

namespace bulwark::trainer {
namespace {

ModelConfig Tiny() {
  ModelConfig c;
  c.vocab_size = 50;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.ffn = 48;
  c.context = 16;
  return c;
}

TEST(Model, LogitsHaveShapeBTV) {
  Transformer m(Tiny());
  m->Initialize(1);
  auto idx = torch::randint(0, 50, {3, 16}, torch::kInt64);
  auto logits = m->forward(idx);
  EXPECT_EQ(logits.sizes().vec(), (std::vector<int64_t>{3, 16, 50}));
  auto shorter = m->forward(idx.narrow(1, 0, 5));
  EXPECT_EQ(shorter.sizes().vec(), (std::vector<int64_t>{3, 5, 50}));
}

TEST(Model, FutureTokensCannotChangePastLogits) {
  Transformer m(Tiny());
  m->Initialize(2);
  torch::NoGradGuard g;
  auto idx = torch::randint(0, 50, {2, 16}, torch::kInt64);
  auto changed = idx.clone();
  changed.narrow(1, 10, 6).fill_(7);  // rewrite positions 10..15
  auto a = m->forward(idx), b = m->forward(changed);
  EXPECT_TRUE(torch::equal(a.narrow(1, 0, 10), b.narrow(1, 0, 10)));
  EXPECT_FALSE(torch::allclose(a.narrow(1, 10, 6), b.narrow(1, 10, 6)));
}

TEST(Model, RopeMatchesDirectRotationFormula) {
  const int64_t T = 7, D = 8;
  auto [cos, sin] = RopeTables(T, D);
  auto x = torch::randn({1, 1, T, D}, torch::kFloat64).to(torch::kFloat32);
  auto y = ApplyRope(x, cos, sin);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < D / 2; ++i) {
      double theta = t * std::pow(10000.0, -2.0 * i / D);
      double a = x[0][0][t][i].item<double>(), b = x[0][0][t][i + D / 2].item<double>();
      EXPECT_NEAR(y[0][0][t][i].item<double>(), a * std::cos(theta) - b * std::sin(theta), 1e-5);
      EXPECT_NEAR(y[0][0][t][i + D / 2].item<double>(), a * std::sin(theta) + b * std::cos(theta), 1e-5);
    }
  }
  // A rotation keeps norms: attention scores depend on relative position only.
  EXPECT_TRUE(torch::allclose(x.norm(2, -1), y.norm(2, -1), 1e-5, 1e-5));
}

TEST(Model, ParameterCountMatchesFormula) {
  ModelConfig c = Tiny();
  Transformer m(c);
  int64_t C = c.d_model, F = c.ffn, V = c.vocab_size, L = c.n_layers;
  int64_t expected = V * C + L * (4 * C * C + 3 * C * F + 2 * C) + C + V * C;
  EXPECT_EQ(CountParameters(*m), expected);
}

TEST(Model, NormalizedInitGivesUnitRowsInBlocks) {
  ModelConfig c = Tiny();
  c.init = "normalized";
  Transformer m(c);
  m->Initialize(3);
  auto w = m->blocks[0]->as<Block>()->mlp->gate->weight;
  EXPECT_TRUE(torch::allclose(w.norm(2, {1}), torch::ones({c.ffn}), 1e-5, 1e-5));
}

TEST(ParamStore, ParametersAndGradientsLiveInTheFlatBuffers) {
  Transformer m(Tiny());
  m->Initialize(4);
  auto before = m->forward(torch::zeros({1, 4}, torch::kInt64));
  ParamStore store(*m, /*padded_to=*/3);
  EXPECT_EQ(store.num_params(), CountParameters(*m));
  EXPECT_EQ(store.params().numel() % 3, 0);
  EXPECT_TRUE(torch::equal(before, m->forward(torch::zeros({1, 4}, torch::kInt64))));
  store.ZeroGrad();
  auto loss = m->Loss(torch::randint(0, 50, {2, 8}, torch::kInt64), torch::randint(0, 50, {2, 8}, torch::kInt64));
  loss.backward();
  const float* lo = store.grads().data_ptr<float>();
  const float* hi = lo + store.num_params();
  for (auto& p : m->parameters()) {
    const float* g = p.grad().data_ptr<float>();
    EXPECT_TRUE(g >= lo && g + p.numel() <= hi) << "a gradient lives outside the flat buffer";
    EXPECT_TRUE(p.data_ptr<float>() >= store.params().data_ptr<float>());
  }
  EXPECT_GT(store.GradsView().abs().sum().item<double>(), 0);
  // Groups: matrices decay, vectors do not; no POET group without POET.
  ASSERT_EQ(store.groups().size(), 3u);
  EXPECT_TRUE(store.groups()[0].weight_decay);
  EXPECT_EQ(store.groups()[1].end, store.num_params());
  EXPECT_EQ(store.poet_group().begin, store.poet_group().end);
}

TEST(AdamW, MatchesLibtorchAdamW) {
  torch::manual_seed(0);
  auto w = torch::randn({64});
  auto ref = w.clone().requires_grad_(true);
  torch::optim::AdamW ref_opt({ref}, torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1));

  torch::nn::Linear lin(torch::nn::LinearOptions(64, 1).bias(false));
  {
    torch::NoGradGuard g;
    lin->weight.view({64}).copy_(w);
  }
  ParamStore store(*lin);
  AdamW opt(store, 0, store.num_params(), {0.9, 0.95, 1e-8, 0.1});
  for (int t = 1; t <= 20; ++t) {
    auto g = torch::randn({64});
    ref_opt.zero_grad();
    ref.mutable_grad() = g.clone();
    ref_opt.step();
    store.GradsView().copy_(g);
    opt.Step(1e-2, t);
  }
  EXPECT_TRUE(torch::allclose(store.ParamsView(), ref.detach(), 1e-5, 1e-6))
      << (store.ParamsView() - ref.detach()).abs().max().item<float>();
}

TEST(AdamW, ShardedRangesTogetherEqualOneUnshardedUpdate) {
  torch::nn::Linear lin(torch::nn::LinearOptions(10, 7).bias(false));
  ParamStore a(*lin, 2);
  torch::nn::Linear lin2(torch::nn::LinearOptions(10, 7).bias(false));
  ParamStore b(*lin2, 2);
  b.params().copy_(a.params());
  AdamW whole(a, 0, a.num_params(), {});
  int64_t half = b.params().numel() / 2;
  AdamW lo(b, 0, half, {}), hi(b, half, b.num_params(), {});
  for (int t = 1; t <= 5; ++t) {
    auto g = torch::randn({a.num_params()});
    a.GradsView().copy_(g);
    b.GradsView().copy_(g);
    whole.Step(1e-3, t);
    lo.Step(1e-3, t);
    hi.Step(1e-3, t);
  }
  EXPECT_TRUE(torch::equal(a.ParamsView(), b.ParamsView()));
}

TEST(Schedule, WarmupThenCosineToFloor) {
  EXPECT_DOUBLE_EQ(LearningRate(0, 100, 10, 1.0, 0.1), 0.1);
  EXPECT_DOUBLE_EQ(LearningRate(9, 100, 10, 1.0, 0.1), 1.0);
  EXPECT_DOUBLE_EQ(LearningRate(10, 100, 10, 1.0, 0.1), 1.0);
  EXPECT_NEAR(LearningRate(55, 100, 10, 1.0, 0.1), 0.55, 1e-12);
  EXPECT_NEAR(LearningRate(100, 100, 10, 1.0, 0.1), 0.1, 1e-12);
}

// ---------------------------------------------------------------- stages and precision

// Two pipeline stages (embedding + block 0 | block 1 + head), the boundary
// cut as send/recv cut it, give the single-stage loss and gradients.
TEST(Model, TwoStagesForwardAndBackwardEqualOneStage) {
  Transformer m(Tiny());
  m->Initialize(5);
  auto idx = torch::randint(0, 50, {2, 16}, torch::kInt64), tgt = torch::randint(0, 50, {2, 16}, torch::kInt64);
  auto whole = m->Loss(idx, tgt);
  whole.backward();
  std::vector<torch::Tensor> g1;
  for (auto& p : m->parameters()) {
    g1.push_back(p.grad().clone());
    p.grad().zero_();
  }

  auto sent = m->Body(m->Embed(idx), 0, 1);
  auto received = sent.detach().requires_grad_(true);
  auto logits = m->Head(m->Body(received, 1, 2));
  auto staged = kernels::CrossEntropy(logits.view({-1, 50}), tgt.reshape({-1}));
  staged.backward();
  sent.backward(received.grad());
  EXPECT_EQ(staged.item<float>(), whole.item<float>());
  auto params = m->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(torch::allclose(params[i].grad(), g1[i], 1e-5, 1e-6)) << "parameter " << i;
  }
}

// bf16 compute stays within bf16's rounding of fp32 (8 mantissa bits: about
// 0.4% per op) for the loss and the weight gradients' direction.
TEST(Model, Bf16LossAndGradientsTrackFp32) {
  auto cfg = Tiny();
  Transformer a(cfg);
  a->Initialize(6);
  cfg.bf16 = true;
  Transformer b(cfg);
  b->Initialize(6);
  auto idx = torch::randint(0, 50, {4, 16}, torch::kInt64), tgt = torch::randint(0, 50, {4, 16}, torch::kInt64);
  auto la = a->Loss(idx, tgt), lb = b->Loss(idx, tgt);
  la.backward();
  lb.backward();
  EXPECT_EQ(lb.scalar_type(), torch::kFloat32);
  EXPECT_NEAR(la.item<double>(), lb.item<double>(), 0.02);
  auto pa = a->parameters(), pb = b->parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    ASSERT_EQ(pb[i].grad().scalar_type(), torch::kFloat32);  // master gradients stay fp32
    double cos = torch::cosine_similarity(pa[i].grad().flatten(), pb[i].grad().flatten(), 0).item<double>();
    EXPECT_GT(cos, 0.98) << "parameter " << i;
  }
}

// A copy's generator state is checked before the ranks agree on it: the
// state the generator saves resumes; one whose counters are damaged (as a
// standby's restore met, "Invalid mt19937 state") is refused with a reason.
TEST(Model, ACopysGeneratorStateIsCheckedBeforeItIsLoaded) {
  torch::manual_seed(7);
  (void)torch::rand({3});
  at::Tensor good = at::detail::getDefaultCPUGenerator().get_state();
  EXPECT_TRUE(trainer::ResumableGeneratorState(good.data_ptr(), good.numel()).ok());
  at::Tensor bad = good.clone();
  std::memset(bad.data_ptr(), 0, bad.numel());  // not seeded, nothing left
  Status s = trainer::ResumableGeneratorState(bad.data_ptr(), bad.numel());
  EXPECT_EQ(s.code(), Status::Code::kCorrupt);
  EXPECT_NE(s.message().find("generator state cannot be resumed (Invalid mt19937 state"), std::string::npos)
      << s.message();
  EXPECT_FALSE(trainer::ResumableGeneratorState(good.data_ptr(), 10).ok()) << "a truncated state";
}

}  // namespace
}  // namespace bulwark::trainer
