// POET layers in process: identities the method promises, against direct
// computation.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "trainer/model/model.h"
#include "trainer/model/poet.h"

namespace bulwark::trainer {
namespace {

PoetOptions Bs(int b = 8) {
  PoetOptions o;
  o.enabled = true;
  o.variant = "bs";
  o.block_size = b;
  return o;
}
PoetOptions Fs(double f = 0.5) {
  PoetOptions o = Bs();
  o.variant = "fs";
  o.fs_fraction = f;
  return o;
}

// A layer with W0 drawn at random and Q set to small random values.
PoetLinear Layer(const PoetOptions& o, int64_t in, int64_t out, double q_scale, uint64_t seed = 1) {
  torch::manual_seed(seed);
  PoetLinear l(in, out, o, /*layer=*/3);
  l->SetInitialWeight(torch::randn({out, in}) / std::sqrt(static_cast<double>(in)));
  l->DrawIndices(seed, 0);
  torch::NoGradGuard g;
  l->q_out.copy_(torch::randn_like(l->q_out) * q_scale);
  l->q_in.copy_(torch::randn_like(l->q_in) * q_scale);
  return l;
}

double RelErr(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).norm() / b.norm()).item<double>();
}

TEST(Poet, ZeroQIsExactlyThePlainLayerWithW0) {
  for (auto o : {Bs(8), Fs(0.5), Fs(0.25)}) {
    for (std::string apply : {"weight", "activations"}) {
      if (o.variant == "fs" && apply == "activations") continue;
      o.apply = apply;
      auto l = Layer(o, 32, 48, 0.0);
      auto x = torch::randn({5, 7, 32});
      EXPECT_TRUE(torch::equal(l->forward(x), torch::nn::functional::linear(x, l->w0)))
          << o.variant << " " << apply;
    }
  }
}

TEST(Poet, WeightAndActivationFormsAgree) {
  auto o = Bs(8);
  auto l = Layer(o, 32, 48, 0.05);
  auto x = torch::randn({6, 32});
  auto by_weight = l->forward(x);
  o.apply = "activations";
  auto l2 = Layer(o, 32, 48, 0.05);
  EXPECT_LT(RelErr(l2->forward(x), by_weight), 1e-5);
}

TEST(Poet, EffectiveWeightIsRW0PWithOrthogonalFactors) {
  auto l = Layer(Bs(8), 32, 48, 0.05);
  torch::NoGradGuard g;
  auto w = l->EffectiveWeight(), w0 = l->w0;
  EXPECT_GT(RelErr(w, w0), 1e-2);  // the rotations act
  // Singular values are W0's up to the Cayley-Neumann error (k = 2 here:
  // |R R^T - I| ~ |Q|^6 for these |Q| ~ 0.2-0.4 blocks).
  auto s = torch::linalg::svdvals(w.to(torch::kFloat64), c10::nullopt);
  auto s0 = torch::linalg::svdvals(w0.to(torch::kFloat64), c10::nullopt);
  EXPECT_LT(((s - s0).abs().max() / s0.max()).item<double>(), 1e-4);
  auto d = l->Diagnose();
  EXPECT_LT(d.orth_error_r, 1e-4);
  EXPECT_GT(d.orth_error_r, 0.0);
}

TEST(Poet, MergeKeepsTheFunctionAndResetsQ) {
  for (auto o : {Bs(8), Fs(0.5)}) {
    auto l = Layer(o, 32, 48, 0.1);
    auto x = torch::randn({9, 32});
    auto before = l->forward(x).detach();
    auto idx_before = l->idx_in.clone();
    l->Merge(/*seed=*/7, /*count=*/1);
    EXPECT_EQ(l->q_out.abs().max().item<float>(), 0.0f);
    EXPECT_EQ(l->q_in.abs().max().item<float>(), 0.0f);
    EXPECT_FALSE(torch::equal(idx_before, l->idx_in)) << "new permutation / index set";
    EXPECT_LT(RelErr(l->forward(x).detach(), before), 1e-5) << o.variant;
  }
}

TEST(Poet, SkewFromUpperIsSkewSymmetric) {
  auto upper = torch::randn({3, 6 * 5 / 2});
  auto q = SkewFromUpper(upper, 6);
  EXPECT_TRUE(torch::equal(q, -q.transpose(1, 2)));
  EXPECT_EQ(q.diagonal(0, 1, 2).abs().max().item<float>(), 0.0f);
  EXPECT_EQ(q[1][0][1].item<float>(), upper[1][0].item<float>());
}

TEST(Poet, CayleyNeumannIsTheTruncatedSeriesForEveryK) {
  auto q = SkewFromUpper(torch::randn({2, 7 * 6 / 2}, torch::kFloat64) * 0.3, 7);
  auto eye = torch::eye(7, torch::kFloat64).expand_as(q);
  for (int k = 1; k <= 5; ++k) {
    auto sum = eye.clone(), power = eye.clone();
    for (int i = 1; i <= k; ++i) sum = sum + (power = torch::matmul(power, q));
    auto direct = torch::matmul(eye + q, sum);
    EXPECT_LT((CayleyNeumann(q, k) - direct).abs().max().item<double>(), 1e-12) << "k=" << k;
  }
}

TEST(Poet, CayleyNeumannGradientMatchesFiniteDifferences) {
  torch::manual_seed(3);
  const int64_t b = 5;
  auto upper = (torch::randn({2, b * (b - 1) / 2}, torch::kFloat64) * 0.2).requires_grad_(true);
  auto c = torch::randn({2, b, b}, torch::kFloat64);
  auto f = [&](const torch::Tensor& u) { return (CayleyNeumann(SkewFromUpper(u, b), 3) * c).sum(); };
  auto grad = torch::autograd::grad({f(upper)}, {upper})[0];
  auto u = upper.detach().clone();
  const double h = 1e-6;
  for (int64_t i = 0; i < u.size(0); ++i) {
    for (int64_t j = 0; j < u.size(1); ++j) {
      auto up = u.clone(), dn = u.clone();
      up[i][j] += h;
      dn[i][j] -= h;
      double fd = (f(up).item<double>() - f(dn).item<double>()) / (2 * h);
      EXPECT_NEAR(grad[i][j].item<double>(), fd, 1e-7) << i << "," << j;
    }
  }
}

// The parity effect (reference notes): even k leaves R R^T - I = Q^(2k+2),
// odd k about 2 Q^(k+1). The default k = 2 is both cheaper and more
// orthogonal than the paper's k = 3.
TEST(Poet, EvenNeumannTermsAreMoreOrthogonalThanTheNextOdd) {
  torch::manual_seed(4);
  auto q = SkewFromUpper(torch::randn({1, 32 * 31 / 2}, torch::kFloat64), 32);
  q = q * (0.2 / torch::linalg::svdvals(q[0], c10::nullopt).max().item<double>());  // spectral norm 0.2
  auto err = [&](int k) {
    auto r = CayleyNeumann(q, k)[0];
    return (torch::matmul(r, r.t()) - torch::eye(32, torch::kFloat64)).norm().item<double>() / std::sqrt(32.0);
  };
  EXPECT_LT(err(2), err(3));
  EXPECT_LT(err(4), err(5));
  EXPECT_LT(err(2), 1e-4);
}

TEST(Poet, TrainableParameterCountsMatchTheFormulas) {
  for (auto [in, out] : {std::pair<int64_t, int64_t>{256, 256}, {256, 768}, {768, 256}}) {
    for (int b : {32, 64, 128}) {
      PoetLinear l(in, out, Bs(b), 0);
      EXPECT_EQ(l->q_in.numel() + l->q_out.numel(), (in + out) * (b - 1) / 2);
      EXPECT_EQ(PoetParameterCount(in, out, Bs(b)), (in + out) * (b - 1) / 2);
    }
    for (double f : {0.125, 0.25, 0.5, 1.0}) {
      PoetLinear l(in, out, Fs(f), 0);
      int64_t bi = std::llround(f * in), bo = std::llround(f * out);
      EXPECT_EQ(l->q_in.numel() + l->q_out.numel(), bi * (bi - 1) / 2 + bo * (bo - 1) / 2);
    }
  }
}

TEST(Poet, DrawsDependOnlyOnSeedMergeCountAndLayer) {
  PoetLinear a(64, 64, Bs(8), 5), b(64, 64, Bs(8), 5), c(64, 64, Bs(8), 6);
  a->DrawIndices(11, 2);
  b->DrawIndices(11, 2);
  c->DrawIndices(11, 2);
  EXPECT_TRUE(torch::equal(a->idx_in, b->idx_in));  // what two ranks draw
  EXPECT_FALSE(torch::equal(a->idx_in, c->idx_in));
  b->DrawIndices(11, 3);
  EXPECT_FALSE(torch::equal(a->idx_in, b->idx_in));
  // A permutation and its inverse.
  EXPECT_TRUE(torch::equal(a->idx_in.index_select(0, a->inv_in), torch::arange(64, torch::kInt64)));
}

TEST(Poet, ModelMergeKeepsTheLoss) {
  ModelConfig c;
  c.vocab_size = 40;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.ffn = 64;
  c.context = 8;
  c.poet = Bs(8);
  Transformer m(c);
  m->Initialize(9);
  torch::NoGradGuard g;
  for (auto& [name, layer] : m->PoetLayers()) {
    layer->q_in.copy_(torch::randn_like(layer->q_in) * 0.05);
    layer->q_out.copy_(torch::randn_like(layer->q_out) * 0.05);
  }
  auto idx = torch::randint(0, 40, {3, 8}, torch::kInt64), tgt = torch::randint(0, 40, {3, 8}, torch::kInt64);
  auto before = m->forward(idx);
  m->MergePoet(9, 1);
  EXPECT_LT(RelErr(m->forward(idx), before), 1e-5);
  EXPECT_EQ(m->PoetLayers().size(), 14u);  // q, k, v, o, gate, up, down per block
}

}  // namespace
}  // namespace bulwark::trainer
