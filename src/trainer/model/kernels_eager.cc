// kernels::eager: the fused kernels' functions as libtorch ops, for tensors
// off the CPU (kernels.h says why). Each works in the activations' own type
// (bf16 stays bf16 between ops; reductions, softmax and the loss accumulate
// in fp32 inside libtorch's kernels) and returns the type the fused kernel
// returns. Few passes: a GPU step is bound by the bytes these ops move.
#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>

#include "trainer/model/kernels.h"

// at::rms_norm (one fused kernel on CUDA when the weight has the input's
// type) since libtorch 2.4; at::scaled_dot_product_attention since 2.0.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define BULWARK_HAS_RMS_NORM 1
#endif
#if TORCH_VERSION_MAJOR >= 2
#define BULWARK_HAS_SDPA 1
#endif

namespace bulwark::trainer::kernels::eager {
namespace {

torch::Tensor F32(const torch::Tensor& t) { return t.to(torch::kFloat32); }

// x (B, T, N, D): each of the N heads rotated by its position t ("rotate
// half": dimension i of the first half pairs with i + D/2), tables (T', D/2)
// of which the first T rows are used. Three passes in x's type:
//   x * [cos, cos] + roll(x, D/2) * [-sin, sin]
// (roll swaps the halves; its backward is the opposite roll).
torch::Tensor RotateBTND(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t T = x.size(1), D = x.size(3), half = D / 2;
  auto c = cos.narrow(0, 0, T), s = sin.narrow(0, 0, T);
  auto cos_full = torch::cat({c, c}, -1).to(x.scalar_type()).view({1, T, 1, D});
  auto sin_full = torch::cat({-s, s}, -1).to(x.scalar_type()).view({1, T, 1, D});
  return torch::addcmul(x * cos_full, torch::roll(x, {half}, {-1}), sin_full);
}

}  // namespace

torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps,
                      c10::optional<torch::ScalarType> out) {
  const auto type = out.value_or(x.scalar_type());
#ifdef BULWARK_HAS_RMS_NORM
  // One fused kernel each way on CUDA (statistics in fp32). Input and weight
  // in the output's type: a fp32 residual is rounded once on the way in,
  // which is what the output's rounding costs anyway.
  if (!x.is_cpu()) {
    const std::vector<int64_t> shape{x.size(-1)};
    return at::rms_norm(x.to(type), shape, weight.to(type), eps);
  }
#endif
  auto xf = F32(x);
  auto y = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps) * F32(weight);
  return y.to(type);
}

torch::Tensor SwiGlu(const torch::Tensor& gate, const torch::Tensor& up) { return torch::silu(gate) * up; }

torch::Tensor SwiGluPacked(const torch::Tensor& gate_up) {
  // split, not narrow: its backward is one concatenation of the two
  // gradients instead of two zero-filled buffers added together.
  auto parts = gate_up.split(gate_up.size(-1) / 2, -1);
  return SwiGlu(parts[0], parts[1]);
}

torch::Tensor CausalSoftmax(const torch::Tensor& scores, double scale) {
  const int64_t T = scores.size(-1);
  auto future = torch::ones({scores.size(-2), T}, scores.options().dtype(torch::kBool)).triu(1);
  return (scores * scale).masked_fill(future, -INFINITY).softmax(-1);
}

torch::Tensor CausalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
#ifdef BULWARK_HAS_SDPA
  // Flash attention (bf16) or memory-efficient attention (fp32): no (T, T)
  // scores in memory. Their backward accumulates with atomics, so a rank
  // that asked for deterministic algorithms takes the explicit path below.
  if (!q.is_cpu() && !at::globalContext().deterministicAlgorithms()) {
    return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true);
  }
#endif
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  return torch::matmul(CausalSoftmax(torch::matmul(q, k.transpose(-2, -1)), scale), v);
}

torch::Tensor RopeHeads(const torch::Tensor& x, int64_t heads, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2) / heads;
  // Contiguous (B, H, T, D), the fused kernel's layout.
  return RotateBTND(x.view({B, T, heads, D}), cos, sin).transpose(1, 2).contiguous();
}

std::vector<torch::Tensor> QkvHeads(const torch::Tensor& qkv, int64_t heads, const torch::Tensor& cos,
                                    const torch::Tensor& sin) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, D = C / heads;
  // q and k rotated in one pass; v only viewed. Splits (not narrows), so
  // that backward concatenates the pieces' gradients once.
  auto qk_v = qkv.split_with_sizes({2 * C, C}, -1);
  auto rotated = RotateBTND(qk_v[0].view({B, T, 2 * heads, D}), cos, sin);  // (B, T, 2H, D)
  auto q_k = rotated.split(heads, 2);
  return {q_k[0].transpose(1, 2), q_k[1].transpose(1, 2), qk_v[1].view({B, T, heads, D}).transpose(1, 2)};
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
  // fp32 log-probabilities straight from the logits' type; the loss in fp32.
  return torch::nll_loss(torch::log_softmax(logits, -1, torch::kFloat32), targets);
}

}  // namespace bulwark::trainer::kernels::eager
