// kernels::eager: the fused kernels' formulas as libtorch ops, for tensors
// off the CPU (kernels.h says why). Each computes in fp32 and returns the
// type the fused kernel returns.
#include <cmath>

#include "trainer/kernels.h"

namespace bulwark::trainer::kernels::eager {
namespace {

torch::Tensor F32(const torch::Tensor& t) { return t.to(torch::kFloat32); }

// x (B, H, T, D) rotated by the first T rows of the (T', D/2) tables
// ("rotate half"), in fp32.
torch::Tensor Rotate(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t T = x.size(2), half = x.size(3) / 2;
  auto c = cos.narrow(0, 0, T), s = sin.narrow(0, 0, T);
  auto x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  return torch::cat({x1 * c - x2 * s, x1 * s + x2 * c}, -1);
}

// (B, T, H*D) -> (B, H, T, D)
torch::Tensor Heads(const torch::Tensor& x, int64_t heads) {
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2) / heads;
  return x.reshape({B, T, heads, D}).transpose(1, 2);
}

}  // namespace

torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps,
                      c10::optional<torch::ScalarType> out) {
  auto xf = F32(x);
  auto y = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps) * F32(weight);
  return y.to(out.value_or(x.scalar_type()));
}

torch::Tensor SwiGlu(const torch::Tensor& gate, const torch::Tensor& up) {
  return (torch::silu(F32(gate)) * F32(up)).to(gate.scalar_type());
}

torch::Tensor SwiGluPacked(const torch::Tensor& gate_up) {
  const int64_t F = gate_up.size(-1) / 2;
  return SwiGlu(gate_up.narrow(-1, 0, F), gate_up.narrow(-1, F, F));
}

torch::Tensor CausalSoftmax(const torch::Tensor& scores, double scale) {
  const int64_t T = scores.size(-1);
  auto future = torch::ones({scores.size(-2), T}, scores.options().dtype(torch::kBool)).triu(1);
  return (F32(scores) * scale).masked_fill(future, -INFINITY).softmax(-1).to(scores.scalar_type());
}

torch::Tensor RopeHeads(const torch::Tensor& x, int64_t heads, const torch::Tensor& cos, const torch::Tensor& sin) {
  return Rotate(F32(Heads(x, heads)), cos, sin).to(x.scalar_type());
}

std::vector<torch::Tensor> QkvHeads(const torch::Tensor& qkv, int64_t heads, const torch::Tensor& cos,
                                    const torch::Tensor& sin) {
  const int64_t C = qkv.size(-1) / 3;
  return {RopeHeads(qkv.narrow(-1, 0, C), heads, cos, sin), RopeHeads(qkv.narrow(-1, C, C), heads, cos, sin),
          Heads(qkv.narrow(-1, 2 * C, C), heads)};
}

torch::Tensor Bf16Weights(const std::vector<torch::Tensor>& masters, const torch::Tensor& /*w16*/) {
  auto w = masters.size() == 1 ? masters[0] : torch::cat(masters, 0);
  return w.to(torch::kBFloat16);
}

void FloatToBf16(const torch::Tensor& src, torch::Tensor& dst) {
  torch::NoGradGuard no_grad;
  dst.copy_(src);
}

torch::Tensor ResidualAdd(const torch::Tensor& x, const torch::Tensor& y) { return x + y; }

torch::Tensor CrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(F32(logits), targets);
}

}  // namespace bulwark::trainer::kernels::eager
