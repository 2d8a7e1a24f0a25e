// Fused CPU kernels for the model's memory-bound layers, each a libtorch
// autograd Function with a hand-written backward (llm.c's approach).
//
// Why: at the small config the matmuls already run at the BLAS peak, so the
// rest of a step is elementwise passes over activations. Eager libtorch
// makes 4-8 passes for an RMSNorm or a masked softmax and its backward; these
// make one or two. Every kernel is deterministic for any thread count:
// reductions across rows use fixed blocks summed in a fixed order, so exact
// resume never depends on scheduling.
#pragma once

#include <torch/torch.h>

namespace bulwark::trainer::kernels {

// Every kernel takes float32 or bfloat16 activations and does its arithmetic
// in float32 (statistics, exponentials, sums); bf16 is only how activations
// are stored between matmuls. The row loops live in simd.cc.

// y = x * rsqrt(mean(x^2) + eps) * weight over the last dimension; y has type
// `out` (default: x's), so a bf16 matmul input needs no separate cast.
torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps,
                      c10::optional<torch::ScalarType> out = c10::nullopt);

// silu(gate) * up, elementwise.
torch::Tensor SwiGlu(const torch::Tensor& gate, const torch::Tensor& up);
// The same on one (..., 2F) tensor whose first F columns are the gate and the
// last F the up projection (one matmul computes both) -> (..., F).
torch::Tensor SwiGluPacked(const torch::Tensor& gate_up);

// softmax(scale * scores) over the last dimension with positions j > i
// masked out (causal); scores (..., T, T).
torch::Tensor CausalSoftmax(const torch::Tensor& scores, double scale);
// Causal attention of q, k, v (B, H, T, D) -> (B, H, T, D), scaled by
// 1/sqrt(D): CausalSoftmax(q k^T) v on the CPU.
torch::Tensor CausalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

// Rotary embedding and head split in one pass: x (B, T, H*D) from a linear
// layer -> (B, H, T, D) rotated ("rotate half" convention, tables (T', D/2)).
torch::Tensor RopeHeads(const torch::Tensor& x, int64_t heads, const torch::Tensor& cos, const torch::Tensor& sin);
// The same for a packed q|k|v projection (B, T, 3*H*D) -> {q, k, v}, each
// (B, H, T, D); q and k rotated, v only split.
std::vector<torch::Tensor> QkvHeads(const torch::Tensor& qkv, int64_t heads, const torch::Tensor& cos,
                                    const torch::Tensor& sin);

// bf16 stand-ins for fp32 master weights: `w16` (filled beforehand, usually a
// view of a flat bf16 copy of every parameter) is returned for use in a
// matmul; it stands for `masters` (1 to 3) stacked along dim 0. Backward adds
// the bf16 gradient, converted, straight into each master's .grad(): one
// vectorized pass instead of ATen's cast and autograd's separate accumulate.
torch::Tensor Bf16Weights(const std::vector<torch::Tensor>& masters, const torch::Tensor& w16);
// dst = bf16(src), both contiguous, vectorized (simd.cc).
void FloatToBf16(const torch::Tensor& src, torch::Tensor& dst);
// x + y for the fp32 residual stream x and a branch y: fp32 + bf16 in one
// vectorized pass (ATen's mixed-type add converts element by element), the
// branch's gradient cast back to bf16 the same way. Same types: x + y.
torch::Tensor ResidualAdd(const torch::Tensor& x, const torch::Tensor& y);

// Mean cross-entropy of logits (N, V) against int64 targets (N).
torch::Tensor CrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets);

// The same functions as libtorch ops (autograd derives the backward): what
// every function above runs for tensors that are not on the CPU (a CUDA
// rank, --device cuda), since the fused kernels read host memory. Same types
// in and out; bf16 activations stay bf16 (libtorch's reductions, softmax and
// loss accumulate in fp32), so they equal the fused kernels within bf16
// rounding, not bitwise (kernels_test checks both on the CPU). On CUDA,
// RmsNorm is libtorch's fused rms_norm and CausalAttention is
// scaled_dot_product_attention (flash attention) unless deterministic
// algorithms are on (docs/gpu.md). Bf16Weights is the exception: a device
// runs the same autograd Function as the CPU (w16 used, the gradient added
// into each master's); the eager one here casts the masters, the reference
// kernels_test compares with.
namespace eager {
torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps,
                      c10::optional<torch::ScalarType> out = c10::nullopt);
torch::Tensor SwiGlu(const torch::Tensor& gate, const torch::Tensor& up);
torch::Tensor SwiGluPacked(const torch::Tensor& gate_up);
torch::Tensor CausalSoftmax(const torch::Tensor& scores, double scale);
torch::Tensor CausalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);
torch::Tensor RopeHeads(const torch::Tensor& x, int64_t heads, const torch::Tensor& cos, const torch::Tensor& sin);
std::vector<torch::Tensor> QkvHeads(const torch::Tensor& qkv, int64_t heads, const torch::Tensor& cos,
                                    const torch::Tensor& sin);
// Ignores `w16`: the masters are cast on use.
torch::Tensor Bf16Weights(const std::vector<torch::Tensor>& masters, const torch::Tensor& w16);
void FloatToBf16(const torch::Tensor& src, torch::Tensor& dst);
torch::Tensor ResidualAdd(const torch::Tensor& x, const torch::Tensor& y);
torch::Tensor CrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets);
}  // namespace eager

}  // namespace bulwark::trainer::kernels
