// Row kernels on raw float / bf16 buffers, in a translation unit of their own
// built with -O3 -mavx2 -mfma and no libtorch headers (so it compiles in a
// second and needs no precompiled header).
//
// Why a separate unit: the fused autograd kernels (kernels.cc) spend their
// time in exp() and in bf16 <-> fp32 conversions. glibc's expf is scalar;
// here exp is a Cephes-style polynomial that the compiler vectorizes, and
// bf16 is handled as its 16-bit pattern with integer shifts, so a row of
// 2048 logits is a handful of AVX2 instructions per 8 elements. Every math
// step is in fp32; reductions use a fixed set of lanes summed in a fixed
// order, so results do not depend on the thread count.
//
// Types: `float` or `Bf16` (the upper 16 bits of an IEEE float, rounded to
// nearest even, the same bits as c10::BFloat16).
#pragma once

#include <cstdint>

namespace bulwark::trainer::simd {

struct Bf16 {
  uint16_t bits;
};

// True when this CPU has AVX2 and FMA, which this unit was compiled for; the
// trainer refuses to start otherwise (an illegal instruction would be worse).
bool CpuSupported();

// RMSNorm: y = x * rstd * w with rstd = 1/sqrt(mean(x^2) + eps), per row of C.
template <class TX, class TY>
void RmsNormRows(const TX* x, const float* w, TY* y, float* rstd, int64_t rows, int64_t C, float eps);
// dx and dw (accumulated into dw_acc, length C) for rows of dy.
template <class TX, class TG>
void RmsNormBackwardRows(const TX* x, const float* w, const float* rstd, const TG* dy, TX* dx, float* dw_acc,
                         int64_t rows, int64_t C);

// h = silu(g) * u over n elements, and its backward.
template <class T>
void SwiGlu(const T* g, const T* u, T* h, int64_t n);
template <class T>
void SwiGluBackward(const T* g, const T* u, const T* dh, T* dg, T* du, int64_t n);

// p[0..n) = softmax(scale * s[0..n)), p[n..T) = 0 (causal row with n visible keys).
template <class T>
void CausalSoftmaxRow(const T* s, T* p, int64_t n, int64_t T_, float scale);
template <class T>
void CausalSoftmaxBackwardRow(const T* p, const T* dp, T* ds, int64_t n, int64_t T_, float scale);

// log(sum(exp(row))) of a row of V logits.
template <class T>
float LogSumExpRow(const T* row, int64_t V);
// d[v] = exp(row[v] - lse) * g, then d[target] -= g.
template <class T>
void CrossEntropyGradRow(const T* row, float lse, float g, int64_t target, T* d, int64_t V);

// Rotate-half RoPE of one head vector of D = 2*half: sign +1 rotates
// (y1 = x1 c - x2 s, y2 = x1 s + x2 c), sign -1 applies the transpose.
template <class T>
void RopeRow(const T* x, T* y, const float* c, const float* s, int64_t half, float sign);
// y = bf16(x) over n elements (round to nearest even).
void FloatToBf16(const float* x, Bf16* y, int64_t n);
// y += float(x) over n elements.
void AddBf16ToFloat(const Bf16* x, float* y, int64_t n);

// z = x + float(y) over n elements (the residual add of a bf16 branch).
void AddFloatBf16(const float* x, const Bf16* y, float* z, int64_t n);

// Plain copy with conversion (a head split without rotation).
template <class T>
void CopyRow(const T* x, T* y, int64_t n);

}  // namespace bulwark::trainer::simd
