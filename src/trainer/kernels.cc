#include "trainer/kernels.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <vector>

namespace bulwark::trainer::kernels {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// Rows per block for cross-row reductions: fixed, so the summation order and
// therefore the bits of the result never depend on the thread count.
constexpr int64_t kRowBlock = 64;
// Elementwise work is split in grains this large (at::parallel_for).
constexpr int64_t kGrain = 1 << 14;

// ----------------------------------------------------------------------------
// RMSNorm

struct RmsNormFn : torch::autograd::Function<RmsNormFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor w, double eps) {
    x = x.contiguous();
    const int64_t C = x.size(-1), N = x.numel() / C;
    auto y = torch::empty_like(x);
    auto r = torch::empty({N}, x.options());
    const float *px = x.data_ptr<float>(), *pw = w.data_ptr<float>();
    float *py = y.data_ptr<float>(), *pr = r.data_ptr<float>();
    at::parallel_for(0, N, 16, [&](int64_t b, int64_t e) {
      for (int64_t n = b; n < e; ++n) {
        const float* xr = px + n * C;
        float ss = 0;
        for (int64_t i = 0; i < C; ++i) ss += xr[i] * xr[i];
        float rn = 1.0f / std::sqrt(ss / C + static_cast<float>(eps));
        pr[n] = rn;
        float* yr = py + n * C;
        for (int64_t i = 0; i < C; ++i) yr[i] = xr[i] * rn * pw[i];
      }
    });
    ctx->save_for_backward({x, w, r});
    return y;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto saved = ctx->get_saved_variables();
    auto x = saved[0], w = saved[1], r = saved[2];
    auto dy = grads[0].contiguous();
    const int64_t C = x.size(-1), N = x.numel() / C;
    const int64_t blocks = (N + kRowBlock - 1) / kRowBlock;
    auto dx = torch::empty_like(x);
    auto dw_parts = torch::zeros({blocks, C}, x.options());
    const float *px = x.data_ptr<float>(), *pw = w.data_ptr<float>(), *pr = r.data_ptr<float>(),
                *pdy = dy.data_ptr<float>();
    float *pdx = dx.data_ptr<float>(), *pdw = dw_parts.data_ptr<float>();
    at::parallel_for(0, blocks, 1, [&](int64_t bb, int64_t be) {
      for (int64_t blk = bb; blk < be; ++blk) {
        float* dwb = pdw + blk * C;
        for (int64_t n = blk * kRowBlock; n < std::min(N, (blk + 1) * kRowBlock); ++n) {
          const float *xr = px + n * C, *gr = pdy + n * C;
          const float rn = pr[n];
          float dot = 0;
          for (int64_t i = 0; i < C; ++i) dot += gr[i] * pw[i] * xr[i];
          const float k = rn * rn * rn * dot / C;
          float* dxr = pdx + n * C;
          for (int64_t i = 0; i < C; ++i) {
            dxr[i] = rn * gr[i] * pw[i] - k * xr[i];
            dwb[i] += gr[i] * xr[i] * rn;
          }
        }
      }
    });
    return {dx, dw_parts.sum(0), torch::Tensor()};
  }
};

// ----------------------------------------------------------------------------
// SwiGLU

struct SwiGluFn : torch::autograd::Function<SwiGluFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor g, torch::Tensor u) {
    g = g.contiguous();
    u = u.contiguous();
    auto h = torch::empty_like(g);
    const float *pg = g.data_ptr<float>(), *pu = u.data_ptr<float>();
    float* ph = h.data_ptr<float>();
    at::parallel_for(0, g.numel(), kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) ph[i] = pg[i] / (1.0f + std::exp(-pg[i])) * pu[i];
    });
    ctx->save_for_backward({g, u});
    return h;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto saved = ctx->get_saved_variables();
    auto g = saved[0], u = saved[1];
    auto dh = grads[0].contiguous();
    auto dg = torch::empty_like(g), du = torch::empty_like(u);
    const float *pg = g.data_ptr<float>(), *pu = u.data_ptr<float>(), *pdh = dh.data_ptr<float>();
    float *pdg = dg.data_ptr<float>(), *pdu = du.data_ptr<float>();
    at::parallel_for(0, g.numel(), kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        float s = 1.0f / (1.0f + std::exp(-pg[i]));
        pdu[i] = pdh[i] * pg[i] * s;
        pdg[i] = pdh[i] * pu[i] * s * (1.0f + pg[i] * (1.0f - s));
      }
    });
    return {dg, du};
  }
};

// ----------------------------------------------------------------------------
// Causal softmax

struct CausalSoftmaxFn : torch::autograd::Function<CausalSoftmaxFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor s, double scale) {
    s = s.contiguous();
    const int64_t T = s.size(-1), rows = s.numel() / T;
    auto p = torch::empty_like(s);
    const float* ps = s.data_ptr<float>();
    float* pp = p.data_ptr<float>();
    const float sc = static_cast<float>(scale);
    at::parallel_for(0, rows, 64, [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        const int64_t i = row % T;  // query position: sees keys 0..i
        const float* sr = ps + row * T;
        float* pr = pp + row * T;
        float m = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) m = std::max(m, sr[j] * sc);
        float sum = 0;
        for (int64_t j = 0; j <= i; ++j) sum += (pr[j] = std::exp(sr[j] * sc - m));
        const float inv = 1.0f / sum;
        for (int64_t j = 0; j <= i; ++j) pr[j] *= inv;
        for (int64_t j = i + 1; j < T; ++j) pr[j] = 0.0f;
      }
    });
    ctx->save_for_backward({p});
    ctx->saved_data["scale"] = scale;
    return p;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto p = ctx->get_saved_variables()[0];
    const float sc = static_cast<float>(ctx->saved_data["scale"].toDouble());
    auto dp = grads[0].contiguous();
    const int64_t T = p.size(-1), rows = p.numel() / T;
    auto ds = torch::empty_like(p);
    const float *pp = p.data_ptr<float>(), *pdp = dp.data_ptr<float>();
    float* pds = ds.data_ptr<float>();
    at::parallel_for(0, rows, 64, [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        const int64_t i = row % T;
        const float *pr = pp + row * T, *gr = pdp + row * T;
        float* dr = pds + row * T;
        float dot = 0;
        for (int64_t j = 0; j <= i; ++j) dot += pr[j] * gr[j];
        for (int64_t j = 0; j <= i; ++j) dr[j] = sc * pr[j] * (gr[j] - dot);
        for (int64_t j = i + 1; j < T; ++j) dr[j] = 0.0f;
      }
    });
    return {ds, torch::Tensor()};
  }
};

// ----------------------------------------------------------------------------
// RoPE with head split

// Rotates (or, with sign = -1, un-rotates) one (T, H, D)-strided sequence
// into (H, T, D) layout, or back.
struct RopeHeadsFn : torch::autograd::Function<RopeHeadsFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, int64_t H, torch::Tensor cos,
                               torch::Tensor sin) {
    x = x.contiguous();
    const int64_t B = x.size(0), T = x.size(1), D = x.size(2) / H, half = D / 2;
    auto y = torch::empty({B, H, T, D}, x.options());
    const float *px = x.data_ptr<float>(), *pc = cos.data_ptr<float>(), *ps = sin.data_ptr<float>();
    float* py = y.data_ptr<float>();
    at::parallel_for(0, B * T, 8, [&](int64_t b0, int64_t e0) {
      for (int64_t bt = b0; bt < e0; ++bt) {
        const int64_t b = bt / T, t = bt % T;
        const float *c = pc + t * half, *s = ps + t * half;
        for (int64_t h = 0; h < H; ++h) {
          const float* xr = px + (bt * H + h) * D;
          float* yr = py + ((b * H + h) * T + t) * D;
          for (int64_t i = 0; i < half; ++i) {
            const float x1 = xr[i], x2 = xr[i + half];
            yr[i] = x1 * c[i] - x2 * s[i];
            yr[i + half] = x1 * s[i] + x2 * c[i];
          }
        }
      }
    });
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["H"] = H;
    return y;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto saved = ctx->get_saved_variables();
    auto cos = saved[0], sin = saved[1];
    const int64_t H = ctx->saved_data["H"].toInt();
    auto dy = grads[0].contiguous();  // (B, H, T, D)
    const int64_t B = dy.size(0), T = dy.size(2), D = dy.size(3), half = D / 2;
    auto dx = torch::empty({B, T, H * D}, dy.options());
    const float *pdy = dy.data_ptr<float>(), *pc = cos.data_ptr<float>(), *ps = sin.data_ptr<float>();
    float* pdx = dx.data_ptr<float>();
    at::parallel_for(0, B * T, 8, [&](int64_t b0, int64_t e0) {
      for (int64_t bt = b0; bt < e0; ++bt) {
        const int64_t b = bt / T, t = bt % T;
        const float *c = pc + t * half, *s = ps + t * half;
        for (int64_t h = 0; h < H; ++h) {
          const float* gr = pdy + ((b * H + h) * T + t) * D;
          float* dr = pdx + (bt * H + h) * D;
          for (int64_t i = 0; i < half; ++i) {  // the transpose of the rotation
            dr[i] = gr[i] * c[i] + gr[i + half] * s[i];
            dr[i + half] = -gr[i] * s[i] + gr[i + half] * c[i];
          }
        }
      }
    });
    return {dx, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// ----------------------------------------------------------------------------
// Cross-entropy

struct CrossEntropyFn : torch::autograd::Function<CrossEntropyFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor logits, torch::Tensor targets) {
    logits = logits.contiguous();
    targets = targets.contiguous();
    const int64_t N = logits.size(0), V = logits.size(1);
    auto lse = torch::empty({N}, logits.options());
    auto losses = torch::empty({N}, logits.options().dtype(torch::kFloat64));
    const float* pl = logits.data_ptr<float>();
    const int64_t* pt = targets.data_ptr<int64_t>();
    float* plse = lse.data_ptr<float>();
    double* ploss = losses.data_ptr<double>();
    at::parallel_for(0, N, 16, [&](int64_t b, int64_t e) {
      for (int64_t n = b; n < e; ++n) {
        const float* row = pl + n * V;
        float m = -INFINITY;
        for (int64_t v = 0; v < V; ++v) m = std::max(m, row[v]);
        float sum = 0;
        for (int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - m);
        plse[n] = m + std::log(sum);
        ploss[n] = plse[n] - row[pt[n]];
      }
    });
    ctx->save_for_backward({logits, targets, lse});
    // The mean in double over a fixed order: the reported loss is exact to
    // the last bit of float and independent of thread count.
    return losses.sum().to(torch::kFloat32) / static_cast<double>(N);
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto saved = ctx->get_saved_variables();
    auto logits = saved[0], targets = saved[1], lse = saved[2];
    const int64_t N = logits.size(0), V = logits.size(1);
    const float g = grads[0].item<float>() / static_cast<float>(N);
    auto dl = torch::empty_like(logits);
    const float *pl = logits.data_ptr<float>(), *plse = lse.data_ptr<float>();
    const int64_t* pt = targets.data_ptr<int64_t>();
    float* pd = dl.data_ptr<float>();
    at::parallel_for(0, N, 16, [&](int64_t b, int64_t e) {
      for (int64_t n = b; n < e; ++n) {
        const float* row = pl + n * V;
        float* d = pd + n * V;
        for (int64_t v = 0; v < V; ++v) d[v] = std::exp(row[v] - plse[n]) * g;
        d[pt[n]] -= g;
      }
    });
    return {dl, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  return RmsNormFn::apply(x, weight, eps);
}
torch::Tensor SwiGlu(const torch::Tensor& gate, const torch::Tensor& up) { return SwiGluFn::apply(gate, up); }
torch::Tensor CausalSoftmax(const torch::Tensor& scores, double scale) {
  return CausalSoftmaxFn::apply(scores, scale);
}
torch::Tensor RopeHeads(const torch::Tensor& x, int64_t heads, const torch::Tensor& cos, const torch::Tensor& sin) {
  return RopeHeadsFn::apply(x, heads, cos.narrow(0, 0, x.size(1)).contiguous(), sin.narrow(0, 0, x.size(1)).contiguous());
}
torch::Tensor CrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets) {
  return CrossEntropyFn::apply(logits, targets);
}

}  // namespace bulwark::trainer::kernels
