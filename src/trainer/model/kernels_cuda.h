// Fused CUDA kernels for the model's memory-bound layers on a CUDA rank
// (llm.c's approach): plain CUDA C++ (kernels_cuda.cu and kernels_cuda_qkv_loss.cu), no libtorch. This
// header needs no CUDA header either, so g++ code includes it; the autograd
// Functions around these launchers live in kernels_cuda_fns.cc.
//
// Every kernel reads and writes float32 or bfloat16 and computes in float32.
// Each is deterministic (bitwise repeatable for the same inputs and shapes):
// no atomics, every reduction in a fixed order that depends only on the
// shapes, never on the device or on timing.
//
// Pointers are device pointers to contiguous row-major arrays. A launcher
// returns nullptr when its kernels were launched, else a message (an invalid
// argument, or cudaGetLastError's string after the launch).
#pragma once

#include <cstdint>

struct CUstream_st;

namespace bulwark::trainer::kernels::cuda::raw {

using Stream = CUstream_st*;  // cudaStream_t; nullptr is the default stream

enum class DType : int { kF32 = 0, kBF16 = 1 };

// y = x * rsqrt(mean(x^2) + eps) * w over rows of C; x (N, C) in `xt`, y
// (N, C) in `yt`, w (C) fp32; rstd (N) fp32 saved for the backward.
const char* RmsNormForward(const void* x, DType xt, const float* w, void* y, DType yt, float* rstd, int64_t N,
                           int64_t C, float eps, Stream stream);

// Rows summed per block for the weight's gradient, and the float count of
// the scratch buffer RmsNormBackward needs: RmsNormPartials(N) * C.
constexpr int64_t kRmsNormRowsPerBlock = 32;
inline int64_t RmsNormPartials(int64_t N) { return (N + kRmsNormRowsPerBlock - 1) / kRmsNormRowsPerBlock; }

// dy (N, C) in `dyt` (the forward's output type), x (N, C) in `xt`, w and
// rstd from the forward -> dx (N, C) in `xt`, dw (C) fp32 (overwritten).
// `partials` is scratch of RmsNormPartials(N) * C floats. C <= 12288.
const char* RmsNormBackward(const void* dy, DType dyt, const void* x, DType xt, const float* w, const float* rstd,
                            void* dx, float* dw, float* partials, int64_t N, int64_t C, Stream stream);

// gu (rows, 2F): gate in columns [0, F), up in [F, 2F) -> h (rows, F) =
// silu(gate) * up. All in type `t`.
const char* SwiGluPackedForward(const void* gu, void* h, DType t, int64_t rows, int64_t F, Stream stream);
// dh (rows, F) -> dgu (rows, 2F), all in type `t`.
const char* SwiGluPackedBackward(const void* gu, const void* dh, void* dgu, DType t, int64_t rows, int64_t F,
                                 Stream stream);

// qkv (B, T, 3*H*D) -> q, k, v, each (B, H, T, D); q and k rotated ("rotate
// half": dimension i < D/2 pairs with i + D/2), by tables cos, sin (rows of
// D/2 fp32; row t used for position t, at least T rows). D even.
const char* QkvHeadsForward(const void* qkv, void* q, void* k, void* v, DType t, const float* cos, const float* sin,
                            int64_t B, int64_t T, int64_t H, int64_t D, Stream stream);
// dq, dk, dv (B, H, T, D) -> dqkv (B, T, 3*H*D), the inverse rotation for q
// and k. A null gradient counts as zeros.
const char* QkvHeadsBackward(const void* dq, const void* dk, const void* dv, void* dqkv, DType t, const float* cos,
                             const float* sin, int64_t B, int64_t T, int64_t H, int64_t D, Stream stream);

// Mean cross-entropy of logits (N, V) in `t` against int64 targets (N):
// lse (N) fp32 saved for the backward, losses (N) fp32 scratch, loss (one
// fp32) = the mean, summed in fp64 in a fixed order. A target outside
// [0, V) gives a NaN loss.
const char* CrossEntropyForward(const void* logits, DType t, const int64_t* targets, float* lse, float* losses,
                                float* loss, int64_t N, int64_t V, Stream stream);
// dlogits (N, V) in `t` = (softmax(logits) - onehot(target)) * grad / N,
// grad one fp32 on the device (the loss's upstream gradient).
const char* CrossEntropyBackward(const void* logits, DType t, const int64_t* targets, const float* lse,
                                 const float* grad, void* dlogits, int64_t N, int64_t V, Stream stream);

}  // namespace bulwark::trainer::kernels::cuda::raw
