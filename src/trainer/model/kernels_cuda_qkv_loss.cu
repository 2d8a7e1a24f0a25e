// The fused CUDA kernels of the q|k|v head split with rotary and of the
// cross-entropy (kernels_cuda.h): one block per row, fp32 arithmetic, no
// atomics; layout and determinism as kernels_cuda.cu says.
#include "trainer/model/kernels_cuda_common.cuh"

namespace bulwark::trainer::kernels::cuda::raw {
namespace {

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

}  // namespace

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
