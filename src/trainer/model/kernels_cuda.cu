// Fused CUDA kernels for the model's memory-bound layers (kernels_cuda.h).
//
// Layout of the work: RMSNorm gives each row to one warp (the row's sum of
// squares is a butterfly of shuffles, so every lane holds the same bits);
// SwiGLU and the head split give each row to one block. Loads and stores
// move 4 elements at a time (16 bytes of fp32, 8 of bf16) where the row
// length and the pointers allow it, else one.
//
// Determinism: no atomics. The weight gradient of RMSNorm is summed per
// block of kRmsNormRowsPerBlock rows (each warp over fixed rows into its own
// shared-memory row, then the warps in order), then over the blocks in a
// fixed order by a second kernel. Every order depends only on N and C.
#include "trainer/model/kernels_cuda.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

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
// RMSNorm

template <class TX, class TY, int V>
__global__ void __launch_bounds__(256) RmsNormForwardKernel(const TX* __restrict__ x, const float* __restrict__ w,
                                                            TY* __restrict__ y, float* __restrict__ rstd, int64_t N,
                                                            int C, float eps) {
  const int lane = threadIdx.x % kWarp;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (row >= N) return;  // whole warps leave together
  const TX* xr = x + row * C;
  TY* yr = y + row * C;
  float ss = 0.0f;
  for (int c = lane * V; c < C; c += kWarp * V) {
    float v[V];
    Load<V>(xr + c, v);
#pragma unroll
    for (int j = 0; j < V; ++j) ss += v[j] * v[j];
  }
  ss = WarpSum(ss);
  const float r = rsqrtf(ss / static_cast<float>(C) + eps);
  if (lane == 0) rstd[row] = r;
  for (int c = lane * V; c < C; c += kWarp * V) {
    float v[V], g[V];
    Load<V>(xr + c, v);
    Load<V>(w + c, g);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = v[j] * r * g[j];
    Store<V>(yr + c, v);
  }
}

// dx = r * (dy * w) - x * (r^3 / C) * sum(dy * w * x); each warp's rows'
// dy * x * r summed into its shared row, the block's warps summed in order
// into partials[block].
template <class TX, class TG, int V>
__global__ void __launch_bounds__(256)
    RmsNormBackwardKernel(const TG* __restrict__ dy, const TX* __restrict__ x, const float* __restrict__ w,
                          const float* __restrict__ rstd, TX* __restrict__ dx, float* __restrict__ partials, int64_t N,
                          int C) {
  extern __shared__ float shared_dw[];  // [warps][C]
  const int warps = blockDim.x / kWarp, warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  float* mine = shared_dw + static_cast<int64_t>(warp) * C;
  for (int c = lane * V; c < C; c += kWarp * V) {
    float z[V];
    Zero<V>(z);
    Store<V>(mine + c, z);
  }
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRmsNormRowsPerBlock;
  const int64_t row1 = row0 + kRmsNormRowsPerBlock < N ? row0 + kRmsNormRowsPerBlock : N;
  for (int64_t row = row0 + warp; row < row1; row += warps) {
    const TG* gr = dy + row * C;
    const TX* xr = x + row * C;
    TX* dr = dx + row * C;
    const float r = rstd[row];
    float s = 0.0f;
    for (int c = lane * V; c < C; c += kWarp * V) {
      float g[V], v[V], wv[V];
      Load<V>(gr + c, g);
      Load<V>(xr + c, v);
      Load<V>(w + c, wv);
#pragma unroll
      for (int j = 0; j < V; ++j) s += g[j] * wv[j] * v[j];
    }
    s = WarpSum(s);
    const float k = s * (r * r * r) / static_cast<float>(C);
    for (int c = lane * V; c < C; c += kWarp * V) {
      float g[V], v[V], wv[V], acc[V];
      Load<V>(gr + c, g);
      Load<V>(xr + c, v);
      Load<V>(w + c, wv);
      Load<V>(mine + c, acc);  // this lane's own columns: no other lane touches them
#pragma unroll
      for (int j = 0; j < V; ++j) {
        acc[j] += g[j] * (v[j] * r);
        v[j] = r * (g[j] * wv[j]) - v[j] * k;
      }
      Store<V>(dr + c, v);
      Store<V>(mine + c, acc);
    }
  }
  __syncthreads();
  float* out = partials + static_cast<int64_t>(blockIdx.x) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float t = 0.0f;
    for (int i = 0; i < warps; ++i) t += shared_dw[static_cast<int64_t>(i) * C + c];
    out[c] = t;
  }
}

// dw[c] = sum over p of partials[p][c], in a fixed order: 32 columns per
// block, kSumRows threads per column each over every kSumRows-th partial,
// then those kSumRows sums in order.
constexpr int kSumRows = 16;
__global__ void __launch_bounds__(kWarp* kSumRows)
    ColumnSumKernel(const float* __restrict__ partials, float* __restrict__ dw, int64_t P, int C) {
  __shared__ float sums[kSumRows][kWarp + 1];
  const int c = blockIdx.x * kWarp + threadIdx.x;
  float t = 0.0f;
  if (c < C) {
#pragma unroll 4
    for (int64_t p = threadIdx.y; p < P; p += kSumRows) t += partials[p * C + c];
  }
  sums[threadIdx.y][threadIdx.x] = t;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float u = 0.0f;
#pragma unroll
    for (int i = 0; i < kSumRows; ++i) u += sums[i][threadIdx.x];
    dw[c] = u;
  }
}

// ----------------------------------------------------------------------------
// SwiGLU on a packed (rows, 2F) tensor: one block per row.

__device__ __forceinline__ float Silu(float g) { return g / (1.0f + expf(-g)); }

template <class T, int V>
__global__ void __launch_bounds__(256)
    SwiGluForwardKernel(const T* __restrict__ gu, T* __restrict__ h, int F) {
  const int64_t row = blockIdx.x;
  const T* g = gu + row * 2 * F;
  const T* u = g + F;
  T* hr = h + row * F;
  for (int c = threadIdx.x * V; c < F; c += blockDim.x * V) {
    float gv[V], uv[V];
    Load<V>(g + c, gv);
    Load<V>(u + c, uv);
#pragma unroll
    for (int j = 0; j < V; ++j) gv[j] = Silu(gv[j]) * uv[j];
    Store<V>(hr + c, gv);
  }
}

template <class T, int V>
__global__ void __launch_bounds__(256)
    SwiGluBackwardKernel(const T* __restrict__ gu, const T* __restrict__ dh, T* __restrict__ dgu, int F) {
  const int64_t row = blockIdx.x;
  const T* g = gu + row * 2 * F;
  const T* u = g + F;
  const T* d = dh + row * F;
  T* dg = dgu + row * 2 * F;
  T* du = dg + F;
  for (int c = threadIdx.x * V; c < F; c += blockDim.x * V) {
    float gv[V], uv[V], dv[V], ga[V], ua[V];
    Load<V>(g + c, gv);
    Load<V>(u + c, uv);
    Load<V>(d + c, dv);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float s = 1.0f / (1.0f + expf(-gv[j]));  // sigmoid(g)
      ga[j] = dv[j] * uv[j] * (s * (1.0f + gv[j] * (1.0f - s)));
      ua[j] = dv[j] * (gv[j] * s);
    }
    Store<V>(dg + c, ga);
    Store<V>(du + c, ua);
  }
}

// ----------------------------------------------------------------------------
// Head split with rotary embedding: one block per (b, t) row of qkv; a
// thread takes V dimensions of one head's first half and their partners in
// the second half.

template <class T, int V>
__global__ void __launch_bounds__(512)
    QkvForwardKernel(const T* __restrict__ qkv, T* __restrict__ q, T* __restrict__ k, T* __restrict__ v,
                     const float* __restrict__ cos, const float* __restrict__ sin, int T_, int H, int D) {
  const int64_t bt = blockIdx.x;
  const int b = static_cast<int>(bt / T_), t = static_cast<int>(bt % T_);
  const int half = D / 2, vecs = half / V, per_part = H * vecs;
  const T* row = qkv + bt * 3 * H * D;
  const float* cr = cos + static_cast<int64_t>(t) * half;
  const float* sr = sin + static_cast<int64_t>(t) * half;
  for (int j = threadIdx.x; j < 3 * per_part; j += blockDim.x) {
    const int p = j / per_part, rem = j - p * per_part, h = rem / vecs, i = (rem - h * vecs) * V;
    const T* src = row + (p * H + h) * D;
    T* dst = (p == 0 ? q : p == 1 ? k : v) + ((static_cast<int64_t>(b) * H + h) * T_ + t) * D;
    float a[V], z[V];
    Load<V>(src + i, a);
    Load<V>(src + i + half, z);
    if (p < 2) {
      float c[V], s[V], lo[V], hi[V];
      Load<V>(cr + i, c);
      Load<V>(sr + i, s);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        lo[e] = a[e] * c[e] - z[e] * s[e];
        hi[e] = z[e] * c[e] + a[e] * s[e];
      }
      Store<V>(dst + i, lo);
      Store<V>(dst + i + half, hi);
    } else {
      Store<V>(dst + i, a);
      Store<V>(dst + i + half, z);
    }
  }
}

// The inverse: dx[i] = dy[i] c + dy[i + D/2] s, dx[i + D/2] = dy[i + D/2] c -
// dy[i] s for q and k; v copied. A null gradient reads as zeros.
template <class T, int V>
__global__ void __launch_bounds__(512)
    QkvBackwardKernel(const T* __restrict__ dq, const T* __restrict__ dk, const T* __restrict__ dv,
                      T* __restrict__ dqkv, const float* __restrict__ cos, const float* __restrict__ sin, int T_, int H,
                      int D) {
  const int64_t bt = blockIdx.x;
  const int b = static_cast<int>(bt / T_), t = static_cast<int>(bt % T_);
  const int half = D / 2, vecs = half / V, per_part = H * vecs;
  T* row = dqkv + bt * 3 * H * D;
  const float* cr = cos + static_cast<int64_t>(t) * half;
  const float* sr = sin + static_cast<int64_t>(t) * half;
  for (int j = threadIdx.x; j < 3 * per_part; j += blockDim.x) {
    const int p = j / per_part, rem = j - p * per_part, h = rem / vecs, i = (rem - h * vecs) * V;
    T* dst = row + (p * H + h) * D;
    const T* base = p == 0 ? dq : p == 1 ? dk : dv;
    float a[V], z[V];
    if (base) {
      const T* src = base + ((static_cast<int64_t>(b) * H + h) * T_ + t) * D;
      Load<V>(src + i, a);
      Load<V>(src + i + half, z);
    } else {
      Zero<V>(a);
      Zero<V>(z);
    }
    if (p < 2) {
      float c[V], s[V], lo[V], hi[V];
      Load<V>(cr + i, c);
      Load<V>(sr + i, s);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        lo[e] = a[e] * c[e] + z[e] * s[e];
        hi[e] = z[e] * c[e] - a[e] * s[e];
      }
      Store<V>(dst + i, lo);
      Store<V>(dst + i + half, hi);
    } else {
      Store<V>(dst + i, a);
      Store<V>(dst + i + half, z);
    }
  }
}

// ----------------------------------------------------------------------------
// Cross-entropy: one block per row of logits.

struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};

// Reduces v over the block (a multiple of 32 threads) in a fixed order; every
// thread gets the result. `shared` holds 32 floats.
template <class Op>
__device__ __forceinline__ float BlockReduce(float v, float identity, float* shared, Op op) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, warps = blockDim.x / kWarp;
#pragma unroll
  for (int m = kWarp / 2; m > 0; m >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, m));
  __syncthreads();  // `shared` may still be read from a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : identity;
#pragma unroll
  for (int m = kWarp / 2; m > 0; m >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, m));
  return v;
}

template <class T, int V>
__global__ void __launch_bounds__(512)
    CrossEntropyForwardKernel(const T* __restrict__ logits, const int64_t* __restrict__ targets,
                              float* __restrict__ lse, float* __restrict__ losses, int C) {
  __shared__ float shared[kWarp];
  const int64_t row = blockIdx.x;
  const T* x = logits + row * C;
  float m = -INFINITY;
  for (int c = threadIdx.x * V; c < C; c += blockDim.x * V) {
    float v[V];
    Load<V>(x + c, v);
#pragma unroll
    for (int j = 0; j < V; ++j) m = fmaxf(m, v[j]);
  }
  m = BlockReduce(m, -INFINITY, shared, MaxOp{});
  float s = 0.0f;
  for (int c = threadIdx.x * V; c < C; c += blockDim.x * V) {
    float v[V];
    Load<V>(x + c, v);
#pragma unroll
    for (int j = 0; j < V; ++j) s += expf(v[j] - m);
  }
  s = BlockReduce(s, 0.0f, shared, SumOp{});
  if (threadIdx.x == 0) {
    const float l = m + logf(s);
    const int64_t t = targets[row];
    float target = NAN;
    if (t >= 0 && t < C) {
      float v[1];
      Load<1>(x + t, v);
      target = v[0];
    }
    lse[row] = l;
    losses[row] = l - target;
  }
}

// The mean of N losses in fp64: thread i sums i, i + 1024, ... in order,
// then a fixed tree over the threads.
constexpr int kMeanThreads = 1024;
__global__ void __launch_bounds__(kMeanThreads)
    MeanKernel(const float* __restrict__ losses, float* __restrict__ loss, int64_t N) {
  __shared__ double sums[kMeanThreads];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < N; i += kMeanThreads) s += static_cast<double>(losses[i]);
  sums[threadIdx.x] = s;
  __syncthreads();
  for (int half = kMeanThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) sums[threadIdx.x] += sums[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) loss[0] = static_cast<float>(sums[0] / static_cast<double>(N));
}

template <class T, int V>
__global__ void __launch_bounds__(512)
    CrossEntropyBackwardKernel(const T* __restrict__ logits, const int64_t* __restrict__ targets,
                               const float* __restrict__ lse, const float* __restrict__ grad, T* __restrict__ dlogits,
                               int64_t N, int C) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * C;
  T* d = dlogits + row * C;
  const float l = lse[row], g = grad[0] / static_cast<float>(N);
  const int64_t t = targets[row];
  for (int c = threadIdx.x * V; c < C; c += blockDim.x * V) {
    float v[V];
    Load<V>(x + c, v);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = (expf(v[j] - l) - (c + j == t ? 1.0f : 0.0f)) * g;
    Store<V>(d + c, v);
  }
}

// ----------------------------------------------------------------------------
// Launch helpers

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <class... P>
bool AllAligned16(const P*... p) {
  return (... && (p == nullptr || Aligned16(p)));
}

const char* LaunchError() {
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

// ----------------------------------------------------------------------------
// Launchers

const char* RmsNormForward(const void* x, DType xt, const float* w, void* y, DType yt, float* rstd, int64_t N,
                           int64_t C, float eps, Stream stream) {
  if (N < 0 || C <= 0 || C > kMaxInt) return "RmsNormForward: bad shape";
  if (N == 0) return nullptr;
  const bool vec = C % 4 == 0 && AllAligned16(x, y, w);
  constexpr int kThreads = 256, kRows = kThreads / kWarp;
  const int64_t blocks = (N + kRows - 1) / kRows;
  if (blocks > kMaxInt) return "RmsNormForward: too many rows";
  ForType(xt, [&](auto tx) {
    using TX = decltype(tx);
    ForType(yt, [&](auto ty) {
      using TY = decltype(ty);
      const TX* px = static_cast<const TX*>(x);
      TY* py = static_cast<TY*>(y);
      if (vec) {
        RmsNormForwardKernel<TX, TY, 4><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
            px, w, py, rstd, N, static_cast<int>(C), eps);
      } else {
        RmsNormForwardKernel<TX, TY, 1><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
            px, w, py, rstd, N, static_cast<int>(C), eps);
      }
    });
  });
  return LaunchError();
}

const char* RmsNormBackward(const void* dy, DType dyt, const void* x, DType xt, const float* w, const float* rstd,
                            void* dx, float* dw, float* partials, int64_t N, int64_t C, Stream stream) {
  if (N < 0 || C <= 0) return "RmsNormBackward: bad shape";
  if (C > kMaxSharedFloats) return "RmsNormBackward: rows longer than 12288 are not supported";
  if (N == 0) {
    const cudaError_t e = cudaMemsetAsync(dw, 0, C * sizeof(float), stream);
    return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
  }
  const bool vec = C % 4 == 0 && AllAligned16(dy, x, w, dx);
  // Warps per block: as many as the shared rows allow, up to 8. Depends on C
  // alone, so the summation order does too.
  int warps = static_cast<int>(kMaxSharedFloats / C);
  if (warps > 8) warps = 8;
  const int threads = warps * kWarp;
  const size_t shared = static_cast<size_t>(warps) * C * sizeof(float);
  const int64_t P = RmsNormPartials(N);
  if (P > kMaxInt) return "RmsNormBackward: too many rows";
  ForType(xt, [&](auto tx) {
    using TX = decltype(tx);
    ForType(dyt, [&](auto tg) {
      using TG = decltype(tg);
      const TG* pg = static_cast<const TG*>(dy);
      const TX* px = static_cast<const TX*>(x);
      TX* pdx = static_cast<TX*>(dx);
      if (vec) {
        RmsNormBackwardKernel<TX, TG, 4><<<static_cast<unsigned>(P), threads, shared, stream>>>(
            pg, px, w, rstd, pdx, partials, N, static_cast<int>(C));
      } else {
        RmsNormBackwardKernel<TX, TG, 1><<<static_cast<unsigned>(P), threads, shared, stream>>>(
            pg, px, w, rstd, pdx, partials, N, static_cast<int>(C));
      }
    });
  });
  if (const char* e = LaunchError()) return e;
  const dim3 sum_threads(kWarp, kSumRows);
  ColumnSumKernel<<<static_cast<unsigned>((C + kWarp - 1) / kWarp), sum_threads, 0, stream>>>(partials, dw, P,
                                                                                             static_cast<int>(C));
  return LaunchError();
}

const char* SwiGluPackedForward(const void* gu, void* h, DType t, int64_t rows, int64_t F, Stream stream) {
  if (rows < 0 || F <= 0 || 2 * F > kMaxInt || rows > kMaxInt) return "SwiGluPackedForward: bad shape";
  if (rows == 0) return nullptr;
  const bool vec = F % 4 == 0 && AllAligned16(gu, h);
  ForType(t, [&](auto tag) {
    using T = decltype(tag);
    const T* pg = static_cast<const T*>(gu);
    T* ph = static_cast<T*>(h);
    const int f = static_cast<int>(F);
    if (vec) {
      const int threads = F / 4 >= 256 ? 256 : static_cast<int>((F / 4 + kWarp - 1) / kWarp * kWarp);
      SwiGluForwardKernel<T, 4><<<static_cast<unsigned>(rows), threads, 0, stream>>>(pg, ph, f);
    } else {
      const int threads = F >= 256 ? 256 : static_cast<int>((F + kWarp - 1) / kWarp * kWarp);
      SwiGluForwardKernel<T, 1><<<static_cast<unsigned>(rows), threads, 0, stream>>>(pg, ph, f);
    }
  });
  return LaunchError();
}

const char* SwiGluPackedBackward(const void* gu, const void* dh, void* dgu, DType t, int64_t rows, int64_t F,
                                 Stream stream) {
  if (rows < 0 || F <= 0 || 2 * F > kMaxInt || rows > kMaxInt) return "SwiGluPackedBackward: bad shape";
  if (rows == 0) return nullptr;
  const bool vec = F % 4 == 0 && AllAligned16(gu, dh, dgu);
  ForType(t, [&](auto tag) {
    using T = decltype(tag);
    const T* pg = static_cast<const T*>(gu);
    const T* pd = static_cast<const T*>(dh);
    T* po = static_cast<T*>(dgu);
    const int f = static_cast<int>(F);
    if (vec) {
      const int threads = F / 4 >= 256 ? 256 : static_cast<int>((F / 4 + kWarp - 1) / kWarp * kWarp);
      SwiGluBackwardKernel<T, 4><<<static_cast<unsigned>(rows), threads, 0, stream>>>(pg, pd, po, f);
    } else {
      const int threads = F >= 256 ? 256 : static_cast<int>((F + kWarp - 1) / kWarp * kWarp);
      SwiGluBackwardKernel<T, 1><<<static_cast<unsigned>(rows), threads, 0, stream>>>(pg, pd, po, f);
    }
  });
  return LaunchError();
}

namespace {

// Threads for a head-split block: one per item, whole warps, at most 512.
int QkvThreads(int64_t items) {
  const int64_t t = (items + kWarp - 1) / kWarp * kWarp;
  return static_cast<int>(t > 512 ? 512 : t);
}

const char* QkvShape(int64_t B, int64_t T, int64_t H, int64_t D) {
  if (B < 0 || T < 0 || H <= 0 || D <= 0 || D % 2 != 0) return "QkvHeads: bad shape (D must be even)";
  if (3 * H * D > kMaxInt || B * T > kMaxInt || T > kMaxInt) return "QkvHeads: shape too large";
  return nullptr;
}

}  // namespace

const char* QkvHeadsForward(const void* qkv, void* q, void* k, void* v, DType t, const float* cos, const float* sin,
                            int64_t B, int64_t T, int64_t H, int64_t D, Stream stream) {
  if (const char* e = QkvShape(B, T, H, D)) return e;
  if (B * T == 0) return nullptr;
  const bool vec = (D / 2) % 4 == 0 && AllAligned16(qkv, q, k, v, cos, sin);
  ForType(t, [&](auto tag) {
    using T_ = decltype(tag);
    const T_* px = static_cast<const T_*>(qkv);
    T_ *pq = static_cast<T_*>(q), *pk = static_cast<T_*>(k), *pv = static_cast<T_*>(v);
    const unsigned blocks = static_cast<unsigned>(B * T);
    if (vec) {
      QkvForwardKernel<T_, 4><<<blocks, QkvThreads(3 * H * (D / 8)), 0, stream>>>(
          px, pq, pk, pv, cos, sin, static_cast<int>(T), static_cast<int>(H), static_cast<int>(D));
    } else {
      QkvForwardKernel<T_, 1><<<blocks, QkvThreads(3 * H * (D / 2)), 0, stream>>>(
          px, pq, pk, pv, cos, sin, static_cast<int>(T), static_cast<int>(H), static_cast<int>(D));
    }
  });
  return LaunchError();
}

const char* QkvHeadsBackward(const void* dq, const void* dk, const void* dv, void* dqkv, DType t, const float* cos,
                             const float* sin, int64_t B, int64_t T, int64_t H, int64_t D, Stream stream) {
  if (const char* e = QkvShape(B, T, H, D)) return e;
  if (B * T == 0) return nullptr;
  const bool vec = (D / 2) % 4 == 0 && AllAligned16(dq, dk, dv, dqkv, cos, sin);
  ForType(t, [&](auto tag) {
    using T_ = decltype(tag);
    const T_ *pq = static_cast<const T_*>(dq), *pk = static_cast<const T_*>(dk), *pv = static_cast<const T_*>(dv);
    T_* po = static_cast<T_*>(dqkv);
    const unsigned blocks = static_cast<unsigned>(B * T);
    if (vec) {
      QkvBackwardKernel<T_, 4><<<blocks, QkvThreads(3 * H * (D / 8)), 0, stream>>>(
          pq, pk, pv, po, cos, sin, static_cast<int>(T), static_cast<int>(H), static_cast<int>(D));
    } else {
      QkvBackwardKernel<T_, 1><<<blocks, QkvThreads(3 * H * (D / 2)), 0, stream>>>(
          pq, pk, pv, po, cos, sin, static_cast<int>(T), static_cast<int>(H), static_cast<int>(D));
    }
  });
  return LaunchError();
}

namespace {

int RowThreads(int64_t items) {
  const int64_t t = (items + kWarp - 1) / kWarp * kWarp;
  return static_cast<int>(t > 512 ? 512 : t);
}

}  // namespace

const char* CrossEntropyForward(const void* logits, DType t, const int64_t* targets, float* lse, float* losses,
                                float* loss, int64_t N, int64_t V, Stream stream) {
  if (N <= 0 || V <= 0 || V > kMaxInt || N > kMaxInt) return "CrossEntropyForward: bad shape";
  const bool vec = V % 4 == 0 && AllAligned16(logits);
  ForType(t, [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(logits);
    if (vec) {
      CrossEntropyForwardKernel<T, 4><<<static_cast<unsigned>(N), RowThreads(V / 4), 0, stream>>>(
          px, targets, lse, losses, static_cast<int>(V));
    } else {
      CrossEntropyForwardKernel<T, 1><<<static_cast<unsigned>(N), RowThreads(V), 0, stream>>>(
          px, targets, lse, losses, static_cast<int>(V));
    }
  });
  if (const char* e = LaunchError()) return e;
  MeanKernel<<<1, kMeanThreads, 0, stream>>>(losses, loss, N);
  return LaunchError();
}

const char* CrossEntropyBackward(const void* logits, DType t, const int64_t* targets, const float* lse,
                                 const float* grad, void* dlogits, int64_t N, int64_t V, Stream stream) {
  if (N <= 0 || V <= 0 || V > kMaxInt || N > kMaxInt) return "CrossEntropyBackward: bad shape";
  const bool vec = V % 4 == 0 && AllAligned16(logits, dlogits);
  ForType(t, [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(logits);
    T* pd = static_cast<T*>(dlogits);
    if (vec) {
      CrossEntropyBackwardKernel<T, 4><<<static_cast<unsigned>(N), RowThreads(V / 4), 0, stream>>>(
          px, targets, lse, grad, pd, N, static_cast<int>(V));
    } else {
      CrossEntropyBackwardKernel<T, 1><<<static_cast<unsigned>(N), RowThreads(V), 0, stream>>>(
          px, targets, lse, grad, pd, N, static_cast<int>(V));
    }
  });
  return LaunchError();
}

}  // namespace bulwark::trainer::kernels::cuda::raw
