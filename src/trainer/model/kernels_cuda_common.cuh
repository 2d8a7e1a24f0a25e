// What the fused CUDA kernels' two files (kernels_cuda.cu: RMSNorm and
// SwiGLU; kernels_cuda_qkv_loss.cu: the q|k|v head split and cross-entropy)
// share: 4-wide loads and stores in fp32 arithmetic, the warp sum, and the
// launch helpers. Included by those two files only; internal linkage.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "trainer/model/kernels_cuda.h"

namespace bulwark::trainer::kernels::cuda::raw {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kWarp = 32;
// The weight gradient's per-block shared memory: warps * C floats, kept
// within the 48 KiB every device gives without opting in.
constexpr int kMaxSharedFloats = 48 * 1024 / 4;

// ----------------------------------------------------------------------------
// Element access: V consecutive elements (V = 1 or 4) to and from float.

template <int V>
__device__ __forceinline__ void Load(const float* p, float (&v)[V]) {
  if constexpr (V == 4) {
    const float4 a = *reinterpret_cast<const float4*>(p);
    v[0] = a.x;
    v[1] = a.y;
    v[2] = a.z;
    v[3] = a.w;
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = p[j];
  }
}

template <int V>
__device__ __forceinline__ void Load(const bf16* p, float (&v)[V]) {
  if constexpr (V == 4) {
    const uint2 a = *reinterpret_cast<const uint2*>(p);
    __nv_bfloat162 lo, hi;
    memcpy(&lo, &a.x, sizeof lo);
    memcpy(&hi, &a.y, sizeof hi);
    const float2 l = __bfloat1622float2(lo), h = __bfloat1622float2(hi);
    v[0] = l.x;
    v[1] = l.y;
    v[2] = h.x;
    v[3] = h.y;
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = __bfloat162float(p[j]);
  }
}

template <int V>
__device__ __forceinline__ void Store(float* p, const float (&v)[V]) {
  if constexpr (V == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) p[j] = v[j];
  }
}

template <int V>
__device__ __forceinline__ void Store(bf16* p, const float (&v)[V]) {
  if constexpr (V == 4) {
    const __nv_bfloat162 lo = __floats2bfloat162_rn(v[0], v[1]), hi = __floats2bfloat162_rn(v[2], v[3]);
    uint2 a;
    memcpy(&a.x, &lo, sizeof lo);
    memcpy(&a.y, &hi, sizeof hi);
    *reinterpret_cast<uint2*>(p) = a;
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) p[j] = __float2bfloat16_rn(v[j]);
  }
}

template <int V>
__device__ __forceinline__ void Zero(float (&v)[V]) {
#pragma unroll
  for (int j = 0; j < V; ++j) v[j] = 0.0f;
}

// Sum over the warp; every lane ends with the same bits (a + b == b + a).
__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int m = kWarp / 2; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

// ----------------------------------------------------------------------------
// Launch helpers

inline bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <class... P>
bool AllAligned16(const P*... p) {
  return (... && (p == nullptr || Aligned16(p)));
}

inline const char* LaunchError() {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

// Calls f(float{}) or f(bf16{}) for t.
template <class F>
void ForType(DType t, F&& f) {
  if (t == DType::kBF16) f(bf16{});
  else f(float{});
}

constexpr int64_t kMaxInt = 0x7fffffff;
}  // namespace
}  // namespace bulwark::trainer::kernels::cuda::raw
