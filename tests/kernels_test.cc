// Each fused kernel against the eager libtorch formula it replaces: values
// and gradients.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "trainer/kernels.h"
#include "trainer/model.h"

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

}  // namespace
}  // namespace bulwark::trainer
