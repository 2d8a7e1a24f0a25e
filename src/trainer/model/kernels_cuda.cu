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
#include "trainer/model/kernels_cuda_common.cuh"

namespace bulwark::trainer::kernels::cuda::raw {
namespace {

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

}  // namespace bulwark::trainer::kernels::cuda::raw
