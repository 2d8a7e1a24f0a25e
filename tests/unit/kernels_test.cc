// Each fused kernel against the eager libtorch formula it replaces: values
// and gradients.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "trainer/model/kernels.h"
#include "trainer/model/model.h"

namespace bulwark::trainer {
namespace {

// Runs f on leaf copies of `inputs` and returns the output and the input
// gradients for a fixed random upstream gradient.
std::pair<torch::Tensor, std::vector<torch::Tensor>> ValueAndGrads(
    const std::function<torch::Tensor(std::vector<torch::Tensor>&)>& f, const std::vector<torch::Tensor>& inputs,
    uint64_t seed) {
  std::vector<torch::Tensor> leaves;
  for (auto& t : inputs) leaves.push_back(t.detach().clone().requires_grad_(true));
  auto y = f(leaves);
  torch::manual_seed(seed);
  auto g = torch::randn_like(y);
  y.backward(g);
  std::vector<torch::Tensor> grads;
  for (auto& l : leaves) grads.push_back(l.grad());
  return {y.detach(), grads};
}

void ExpectClose(const torch::Tensor& a, const torch::Tensor& b, double tol, const char* what) {
  EXPECT_TRUE(torch::allclose(a, b, tol, tol)) << what << ": max diff " << (a - b).abs().max().item<double>();
}

TEST(Kernels, RmsNormMatchesEager) {
  auto x = torch::randn({3, 5, 32}), w = torch::randn({32});
  auto [y1, g1] = ValueAndGrads([](auto& in) { return kernels::RmsNorm(in[0], in[1], 1e-5); }, {x, w}, 1);
  auto [y2, g2] = ValueAndGrads(
      [](auto& in) { return in[0] * torch::rsqrt(in[0].pow(2).mean(-1, true) + 1e-5) * in[1]; }, {x, w}, 1);
  ExpectClose(y1, y2, 1e-5, "y");
  ExpectClose(g1[0], g2[0], 1e-4, "dx");
  ExpectClose(g1[1], g2[1], 1e-4, "dw");
}

TEST(Kernels, RmsNormWeightGradientIsIndependentOfThreadCount) {
  auto x = torch::randn({300, 16}), w = torch::randn({16});
  int before = at::get_num_threads();
  at::set_num_threads(1);
  auto [y1, g1] = ValueAndGrads([](auto& in) { return kernels::RmsNorm(in[0], in[1], 1e-5); }, {x, w}, 2);
  at::set_num_threads(2);
  auto [y2, g2] = ValueAndGrads([](auto& in) { return kernels::RmsNorm(in[0], in[1], 1e-5); }, {x, w}, 2);
  at::set_num_threads(before);
  EXPECT_TRUE(torch::equal(g1[1], g2[1]));
  EXPECT_TRUE(torch::equal(g1[0], g2[0]));
}

TEST(Kernels, SwiGluMatchesEager) {
  auto g = torch::randn({4, 40}) * 3, u = torch::randn({4, 40});
  auto [y1, g1] = ValueAndGrads([](auto& in) { return kernels::SwiGlu(in[0], in[1]); }, {g, u}, 3);
  auto [y2, g2] = ValueAndGrads([](auto& in) { return torch::silu(in[0]) * in[1]; }, {g, u}, 3);
  ExpectClose(y1, y2, 1e-5, "y");
  ExpectClose(g1[0], g2[0], 1e-5, "dgate");
  ExpectClose(g1[1], g2[1], 1e-5, "dup");
}

TEST(Kernels, CausalSoftmaxMatchesMaskedEager) {
  const int64_t T = 9;
  auto s = torch::randn({2, 3, T, T}) * 4;
  auto [y1, g1] = ValueAndGrads([](auto& in) { return kernels::CausalSoftmax(in[0], 0.3); }, {s}, 4);
  auto [y2, g2] = ValueAndGrads(
      [&](auto& in) {
        auto future = torch::ones({T, T}, torch::kBool).triu(1);
        return (in[0] * 0.3).masked_fill(future, -INFINITY).softmax(-1);
      },
      {s}, 4);
  ExpectClose(y1, y2, 1e-6, "p");
  ExpectClose(g1[0], g2[0], 1e-5, "ds");
  EXPECT_EQ(y1[0][0][0][1].item<float>(), 0.0f);  // masked exactly
}

TEST(Kernels, RopeHeadsMatchesSplitThenRotate) {
  const int64_t B = 2, T = 6, H = 3, D = 8;
  auto [cos, sin] = RopeTables(10, D);
  auto x = torch::randn({B, T, H * D});
  auto [y1, g1] = ValueAndGrads([&](auto& in) { return kernels::RopeHeads(in[0], H, cos, sin); }, {x}, 5);
  auto [y2, g2] = ValueAndGrads(
      [&](auto& in) { return ApplyRope(in[0].view({B, T, H, D}).transpose(1, 2), cos, sin); }, {x}, 5);
  ExpectClose(y1, y2, 1e-6, "y");
  ExpectClose(g1[0], g2[0], 1e-6, "dx");
}

TEST(Kernels, CrossEntropyMatchesLibtorch) {
  auto logits = torch::randn({12, 30}) * 3;
  auto targets = torch::randint(0, 30, {12}, torch::kInt64);
  auto [y1, g1] = ValueAndGrads([&](auto& in) { return kernels::CrossEntropy(in[0], targets); }, {logits}, 6);
  auto [y2, g2] = ValueAndGrads(
      [&](auto& in) { return torch::nn::functional::cross_entropy(in[0], targets); }, {logits}, 6);
  ExpectClose(y1, y2, 1e-5, "loss");
  ExpectClose(g1[0], g2[0], 1e-6, "dlogits");
}

// ---------------------------------------------------------------- bf16

// Every kernel in bf16 against its fp32 self: within bf16's rounding.
TEST(Kernels, Bf16KernelsTrackFp32) {
  auto x = torch::randn({4, 16, 64});
  auto w = torch::randn({64});
  auto close = [](const torch::Tensor& a, const torch::Tensor& b, double tol, const char* what) {
    double err = (a.to(torch::kFloat32) - b).abs().max().item<double>() / (b.abs().max().item<double>() + 1e-12);
    EXPECT_LT(err, tol) << what;
  };
  close(kernels::RmsNorm(x, w, 1e-5, torch::kBFloat16), kernels::RmsNorm(x, w, 1e-5), 1e-2, "rmsnorm");
  auto gu = torch::randn({8, 2 * 48});
  close(kernels::SwiGluPacked(gu.to(torch::kBFloat16)), kernels::SwiGluPacked(gu), 1e-2, "swiglu");
  auto s = torch::randn({2, 3, 16, 16}) * 3;
  close(kernels::CausalSoftmax(s.to(torch::kBFloat16), 0.3), kernels::CausalSoftmax(s, 0.3), 1e-2, "softmax");
  auto logits = torch::randn({12, 30}) * 3;
  auto targets = torch::randint(0, 30, {12}, torch::kInt64);
  auto l16 = kernels::CrossEntropy(logits.to(torch::kBFloat16), targets);
  EXPECT_EQ(l16.scalar_type(), torch::kFloat32);
  EXPECT_NEAR(l16.item<double>(), kernels::CrossEntropy(logits, targets).item<double>(), 2e-2);
}

TEST(Kernels, PackedSwiGluAndQkvHeadsMatchTheirSplitForms) {
  auto gu = torch::randn({3, 5, 40});
  auto [y1, g1] = ValueAndGrads([](auto& in) { return kernels::SwiGluPacked(in[0]); }, {gu}, 7);
  auto [y2, g2] = ValueAndGrads(
      [](auto& in) { return kernels::SwiGlu(in[0].narrow(-1, 0, 20), in[0].narrow(-1, 20, 20)); }, {gu}, 7);
  EXPECT_TRUE(torch::equal(y1, y2));
  EXPECT_TRUE(torch::equal(g1[0], g2[0]));

  const int64_t B = 2, T = 6, H = 3, D = 8, C = H * D;
  auto [cos, sin] = RopeTables(10, D);
  auto qkv = torch::randn({B, T, 3 * C});
  auto [z1, h1] = ValueAndGrads(
      [&](auto& in) {
        auto o = kernels::QkvHeads(in[0], H, cos, sin);
        return torch::cat({o[0], o[1], o[2]}, -1);
      },
      {qkv}, 8);
  auto [z2, h2] = ValueAndGrads(
      [&](auto& in) {
        auto q = kernels::RopeHeads(in[0].narrow(-1, 0, C), H, cos, sin);
        auto k = kernels::RopeHeads(in[0].narrow(-1, C, C), H, cos, sin);
        auto v = in[0].narrow(-1, 2 * C, C).reshape({B, T, H, D}).transpose(1, 2);
        return torch::cat({q, k, v}, -1);
      },
      {qkv}, 8);
  EXPECT_TRUE(torch::equal(z1, z2));
  EXPECT_TRUE(torch::equal(h1[0], h2[0]));
}

// The bf16 stand-in's gradient reaches each fp32 master's .grad() exactly as
// autograd's own cast would put it there; ResidualAdd is x + y and its
// gradients are the identity and the cast.
TEST(Kernels, Bf16WeightsAndResidualAddMatchTheCastPath) {
  auto flat = torch::randn({2 * 6 * 4});
  auto a = flat.narrow(0, 0, 24).view({6, 4}).detach().requires_grad_(true);
  auto b = flat.narrow(0, 24, 24).view({6, 4}).detach().requires_grad_(true);
  a.mutable_grad() = torch::zeros({6, 4});
  b.mutable_grad() = torch::zeros({6, 4});
  auto flat16 = flat.to(torch::kBFloat16);
  auto x = torch::randn({5, 4}).to(torch::kBFloat16);
  auto g = torch::randn({5, 12}).to(torch::kBFloat16);
  torch::nn::functional::linear(x, kernels::Bf16Weights({a, b}, flat16.view({12, 4}))).backward(g);

  auto a2 = a.detach().clone().requires_grad_(true), b2 = b.detach().clone().requires_grad_(true);
  torch::nn::functional::linear(x, torch::cat({a2, b2}).to(torch::kBFloat16)).backward(g);
  EXPECT_TRUE(torch::equal(a.grad(), a2.grad()));
  EXPECT_TRUE(torch::equal(b.grad(), b2.grad()));

  auto r = torch::randn({3, 8});
  auto y = torch::randn({3, 8}).to(torch::kBFloat16);
  auto [z1, g1] = ValueAndGrads([](auto& in) { return kernels::ResidualAdd(in[0], in[1]); }, {r, y}, 9);
  auto [z2, g2] = ValueAndGrads([](auto& in) { return in[0] + in[1]; }, {r, y}, 9);
  EXPECT_TRUE(torch::equal(z1, z2));
  EXPECT_TRUE(torch::equal(g1[0], g2[0]));
  EXPECT_TRUE(torch::equal(g1[1], g2[1]));
  EXPECT_EQ(g1[1].scalar_type(), torch::kBFloat16);
}

// ---------------------------------------------------------------- eager

// kernels::eager is what a tensor off the CPU runs (a CUDA rank); here it
// runs on the CPU against the fused kernels: values and gradients, in fp32
// and for bf16 inputs.
TEST(Kernels, EagerFallbacksMatchTheFusedKernels) {
  torch::manual_seed(11);
  const int64_t B = 2, T = 6, H = 3, D = 8, C = H * D;
  auto [cos, sin] = RopeTables(10, D);
  auto x = torch::randn({B, T, C}), w = torch::randn({C});
  auto check = [](const std::function<torch::Tensor(std::vector<torch::Tensor>&)>& fused,
                  const std::function<torch::Tensor(std::vector<torch::Tensor>&)>& eager,
                  const std::vector<torch::Tensor>& in, double tol, const char* what) {
    auto [y1, g1] = ValueAndGrads(fused, in, 9);
    auto [y2, g2] = ValueAndGrads(eager, in, 9);
    EXPECT_EQ(y1.scalar_type(), y2.scalar_type()) << what;
    EXPECT_EQ(y1.sizes(), y2.sizes()) << what;
    ExpectClose(y1.to(torch::kFloat32), y2.to(torch::kFloat32), tol, what);
    for (size_t i = 0; i < g1.size(); ++i) ExpectClose(g1[i], g2[i], 10 * tol, what);
  };
  for (auto type : {torch::kFloat32, torch::kBFloat16}) {
    const double tol = type == torch::kFloat32 ? 1e-5 : 2e-2;
    auto xt = x.to(type);
    check([&](auto& in) { return kernels::RmsNorm(in[0], in[1], 1e-5); },
          [&](auto& in) { return kernels::eager::RmsNorm(in[0], in[1], 1e-5); }, {xt, w}, tol, "rmsnorm");
    check([&](auto& in) { return kernels::RmsNorm(in[0], in[1], 1e-5, torch::kBFloat16); },
          [&](auto& in) { return kernels::eager::RmsNorm(in[0], in[1], 1e-5, torch::kBFloat16); }, {xt, w}, 2e-2,
          "rmsnorm to bf16");
    auto gu = (torch::randn({B, T, 2 * C}) * 2).to(type);
    check([](auto& in) { return kernels::SwiGluPacked(in[0]); },
          [](auto& in) { return kernels::eager::SwiGluPacked(in[0]); }, {gu}, tol, "swiglu");
    auto s = (torch::randn({B, H, T, T}) * 3).to(type);
    check([](auto& in) { return kernels::CausalSoftmax(in[0], 0.3); },
          [](auto& in) { return kernels::eager::CausalSoftmax(in[0], 0.3); }, {s}, tol, "softmax");
    check([&](auto& in) { return kernels::RopeHeads(in[0], H, cos, sin); },
          [&](auto& in) { return kernels::eager::RopeHeads(in[0], H, cos, sin); }, {xt}, tol, "rope");
    auto qkv = torch::randn({B, T, 3 * C}).to(type);
    auto cat = [](std::vector<torch::Tensor> o) { return torch::cat({o[0], o[1], o[2]}, -1); };
    check([&](auto& in) { return cat(kernels::QkvHeads(in[0], H, cos, sin)); },
          [&](auto& in) { return cat(kernels::eager::QkvHeads(in[0], H, cos, sin)); }, {qkv}, tol, "qkv");
    auto logits = (torch::randn({12, 30}) * 3).to(type);
    auto targets = torch::randint(0, 30, {12}, torch::kInt64);
    check([&](auto& in) { return kernels::CrossEntropy(in[0], targets); },
          [&](auto& in) { return kernels::eager::CrossEntropy(in[0], targets); }, {logits}, tol, "cross-entropy");
    auto r = torch::randn({B, T, C});
    check([](auto& in) { return kernels::ResidualAdd(in[0], in[1]); },
          [](auto& in) { return kernels::eager::ResidualAdd(in[0], in[1]); }, {r, xt}, tol, "residual");
  }
  // bf16 weights: the fused one reads a filled bf16 copy, the eager one
  // casts the masters; both send the gradient to each master.
  auto m1 = torch::randn({4, 5}), m2 = torch::randn({3, 5});
  auto w16 = torch::cat({m1, m2}, 0).to(torch::kBFloat16);
  check([&](auto& in) { return kernels::Bf16Weights({in[0], in[1]}, w16); },
        [&](auto& in) { return kernels::eager::Bf16Weights({in[0], in[1]}, w16); }, {m1, m2}, 0, "bf16 weights");
  auto dst = torch::empty({7}, torch::kBFloat16), ref = torch::empty({7}, torch::kBFloat16);
  auto src = torch::randn({7});
  kernels::FloatToBf16(src, ref);
  kernels::eager::FloatToBf16(src, dst);
  EXPECT_TRUE(torch::equal(dst, ref));
}

}  // namespace
}  // namespace bulwark::trainer
