#include "trainer/model/simd.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace bulwark::trainer::simd {
namespace {

// Lanes of every reduction: partial sums in a fixed array, folded in a fixed
// order, so the compiler can vectorize without reassociating anything.
constexpr int kLanes = 16;

inline float Load(float x) { return x; }
inline float Load(Bf16 x) {
  uint32_t u = static_cast<uint32_t>(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline void Store(float& d, float x) { d = x; }
inline void Store(Bf16& d, float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  u += 0x7FFFu + ((u >> 16) & 1u);  // round to nearest even, as c10::BFloat16
  d.bits = static_cast<uint16_t>(u >> 16);
}

// exp(x) to about 1 ulp in [-87, 88] (Cephes expf): x = n ln2 + r, a degree-6
// polynomial in r, then 2^n through the exponent bits. Written without
// branches so loops over it vectorize.
inline float Exp(float x) {
  x = std::min(88.3f, std::max(-87.3f, x));
  float n = std::floor(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t e = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &e, sizeof scale);
  return p * scale;
}

inline float Sigmoid(float x) { return 1.0f / (1.0f + Exp(-x)); }

template <class T>
float SumSquares(const T* x, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      float v = Load(x[i + l]);
      acc[l] += v * v;
    }
  for (; i < n; ++i) {
    float v = Load(x[i]);
    acc[0] += v * v;
  }
  float s = 0;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  return s;
}

template <class T>
float Max(const T* x, int64_t n) {
  float mx[kLanes];
  for (int l = 0; l < kLanes; ++l) mx[l] = -INFINITY;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) mx[l] = std::max(mx[l], Load(x[i + l]));
  for (; i < n; ++i) mx[0] = std::max(mx[0], Load(x[i]));
  float m = mx[0];
  for (int l = 1; l < kLanes; ++l) m = std::max(m, mx[l]);
  return m;
}

}  // namespace

bool CpuSupported() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

template <class TX, class TY>
void RmsNormRows(const TX* x, const float* w, TY* y, float* rstd, int64_t rows, int64_t C, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const TX* xr = x + r * C;
    const float rn = 1.0f / std::sqrt(SumSquares(xr, C) / static_cast<float>(C) + eps);
    rstd[r] = rn;
    TY* yr = y + r * C;
    for (int64_t i = 0; i < C; ++i) Store(yr[i], Load(xr[i]) * rn * w[i]);
  }
}

template <class TX, class TG>
void RmsNormBackwardRows(const TX* x, const float* w, const float* rstd, const TG* dy, TX* dx, float* dw_acc,
                         int64_t rows, int64_t C) {
  for (int64_t r = 0; r < rows; ++r) {
    const TX* xr = x + r * C;
    const TG* gr = dy + r * C;
    const float rn = rstd[r];
    float acc[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= C; i += kLanes)
      for (int l = 0; l < kLanes; ++l) acc[l] += Load(gr[i + l]) * w[i + l] * Load(xr[i + l]);
    for (; i < C; ++i) acc[0] += Load(gr[i]) * w[i] * Load(xr[i]);
    float dot = 0;
    for (int l = 0; l < kLanes; ++l) dot += acc[l];
    const float k = rn * rn * rn * dot / static_cast<float>(C);
    TX* dxr = dx + r * C;
    for (int64_t j = 0; j < C; ++j) {
      const float xv = Load(xr[j]), gv = Load(gr[j]);
      Store(dxr[j], rn * gv * w[j] - k * xv);
      dw_acc[j] += gv * xv * rn;
    }
  }
}

template <class T>
void SwiGlu(const T* g, const T* u, T* h, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float gv = Load(g[i]);
    Store(h[i], gv * Sigmoid(gv) * Load(u[i]));
  }
}

template <class T>
void SwiGluBackward(const T* g, const T* u, const T* dh, T* dg, T* du, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float gv = Load(g[i]), uv = Load(u[i]), d = Load(dh[i]);
    const float s = Sigmoid(gv);
    Store(du[i], d * gv * s);
    Store(dg[i], d * uv * s * (1.0f + gv * (1.0f - s)));
  }
}

template <class T>
void CausalSoftmaxRow(const T* s, T* p, int64_t n, int64_t T_, float scale) {
  const float m = Max(s, n);
  // Exponentials go to an fp32 scratch row (rows are at most the context).
  constexpr int64_t kMax = 4096;
  float buf[kMax];
  const int64_t w = std::min(n, kMax);
  for (int64_t j = 0; j < w; ++j) buf[j] = Exp((Load(s[j]) - m) * scale);
  float acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= w; j += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += buf[j + l];
  for (; j < w; ++j) acc[0] += buf[j];
  for (j = w; j < n; ++j) acc[0] += Exp((Load(s[j]) - m) * scale);
  float sum = 0;
  for (int l = 0; l < kLanes; ++l) sum += acc[l];
  const float inv = 1.0f / sum;
  for (j = 0; j < w; ++j) Store(p[j], buf[j] * inv);
  for (j = w; j < n; ++j) Store(p[j], Exp((Load(s[j]) - m) * scale) * inv);
  for (j = n; j < T_; ++j) Store(p[j], 0.0f);
}

template <class T>
void CausalSoftmaxBackwardRow(const T* p, const T* dp, T* ds, int64_t n, int64_t T_, float scale) {
  float acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += Load(p[j + l]) * Load(dp[j + l]);
  for (; j < n; ++j) acc[0] += Load(p[j]) * Load(dp[j]);
  float dot = 0;
  for (int l = 0; l < kLanes; ++l) dot += acc[l];
  for (int64_t i = 0; i < n; ++i) Store(ds[i], scale * Load(p[i]) * (Load(dp[i]) - dot));
  for (int64_t i = n; i < T_; ++i) Store(ds[i], 0.0f);
}

template <class T>
float LogSumExpRow(const T* row, int64_t V) {
  const float m = Max(row, V);
  float acc[kLanes] = {};
  int64_t v = 0;
  for (; v + kLanes <= V; v += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += Exp(Load(row[v + l]) - m);
  for (; v < V; ++v) acc[0] += Exp(Load(row[v]) - m);
  float sum = 0;
  for (int l = 0; l < kLanes; ++l) sum += acc[l];
  return m + std::log(sum);
}

template <class T>
void CrossEntropyGradRow(const T* row, float lse, float g, int64_t target, T* d, int64_t V) {
  for (int64_t v = 0; v < V; ++v) Store(d[v], Exp(Load(row[v]) - lse) * g);
  Store(d[target], (Exp(Load(row[target]) - lse) - 1.0f) * g);
}

template <class T>
void RopeRow(const T* x, T* y, const float* c, const float* s, int64_t half, float sign) {
  for (int64_t i = 0; i < half; ++i) {
    const float x1 = Load(x[i]), x2 = Load(x[i + half]), sn = sign * s[i];
    Store(y[i], x1 * c[i] - x2 * sn);
    Store(y[i + half], x1 * sn + x2 * c[i]);
  }
}

template <class T>
void CopyRow(const T* x, T* y, int64_t n) {
  std::memcpy(y, x, static_cast<size_t>(n) * sizeof(T));
}

void FloatToBf16(const float* x, Bf16* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) Store(y[i], x[i]);
}

void AddBf16ToFloat(const Bf16* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += Load(x[i]);
}

void AddFloatBf16(const float* x, const Bf16* y, float* z, int64_t n) {
  for (int64_t i = 0; i < n; ++i) z[i] = x[i] + Load(y[i]);
}

#define BULWARK_SIMD_ONE(T)                                                                              \
  template void SwiGlu<T>(const T*, const T*, T*, int64_t);                                             \
  template void SwiGluBackward<T>(const T*, const T*, const T*, T*, T*, int64_t);                       \
  template void CausalSoftmaxRow<T>(const T*, T*, int64_t, int64_t, float);                             \
  template void CausalSoftmaxBackwardRow<T>(const T*, const T*, T*, int64_t, int64_t, float);           \
  template float LogSumExpRow<T>(const T*, int64_t);                                                    \
  template void CrossEntropyGradRow<T>(const T*, float, float, int64_t, T*, int64_t);                   \
  template void RopeRow<T>(const T*, T*, const float*, const float*, int64_t, float);                   \
  template void CopyRow<T>(const T*, T*, int64_t);
BULWARK_SIMD_ONE(float)
BULWARK_SIMD_ONE(Bf16)
#undef BULWARK_SIMD_ONE

#define BULWARK_SIMD_TWO(TX, TY)                                                                         \
  template void RmsNormRows<TX, TY>(const TX*, const float*, TY*, float*, int64_t, int64_t, float);      \
  template void RmsNormBackwardRows<TX, TY>(const TX*, const float*, const float*, const TY*, TX*, float*, \
                                            int64_t, int64_t);
BULWARK_SIMD_TWO(float, float)
BULWARK_SIMD_TWO(float, Bf16)
BULWARK_SIMD_TWO(Bf16, Bf16)
BULWARK_SIMD_TWO(Bf16, float)
#undef BULWARK_SIMD_TWO

}  // namespace bulwark::trainer::simd
