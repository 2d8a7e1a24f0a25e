#include "trainer/model/kernels.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <vector>

#include "trainer/model/simd.h"
#ifdef BULWARK_CUDA_KERNELS
#include "trainer/model/kernels_cuda_fns.h"
#endif

namespace bulwark::trainer::kernels {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;
using simd::Bf16;

// Rows per block for cross-row reductions: fixed, so the summation order and
// therefore the bits of the result never depend on the thread count.
constexpr int64_t kRowBlock = 64;
// Elementwise work is split in grains this large (at::parallel_for).
constexpr int64_t kGrain = 1 << 14;

// The element type simd.h sees for a tensor: float, or Bf16 for bfloat16
// (same bits as c10::BFloat16).
template <class T>
T* Ptr(const torch::Tensor& t) {
  return reinterpret_cast<T*>(t.data_ptr());
}

// Calls f(float{}) or f(Bf16{}) for the tensor's dtype.
template <class F>
void ForType(const torch::Tensor& t, F&& f) {
  if (t.scalar_type() == torch::kBFloat16) f(Bf16{});
  else if (t.scalar_type() == torch::kFloat32) f(float{});
  else TORCH_CHECK(false, "fused kernels take float32 or bfloat16, not ", t.scalar_type());
}

// ----------------------------------------------------------------------------
// RMSNorm: statistics and gain in fp32 whatever the input and output types.

struct RmsNormFn : torch::autograd::Function<RmsNormFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor w, double eps,
                               int64_t out_type) {
    x = x.contiguous();
    const int64_t C = x.size(-1), N = x.numel() / C;
    auto y = torch::empty(x.sizes(), x.options().dtype(static_cast<torch::ScalarType>(out_type)));
    auto r = torch::empty({N}, x.options().dtype(torch::kFloat32));
    const float* pw = w.data_ptr<float>();
    float* pr = r.data_ptr<float>();
    ForType(x, [&](auto tx) {
      using TX = decltype(tx);
      ForType(y, [&](auto ty) {
        using TY = decltype(ty);
        const TX* px = Ptr<TX>(x);
        TY* py = Ptr<TY>(y);
        at::parallel_for(0, N, 16, [&](int64_t b, int64_t e) {
          simd::RmsNormRows(px + b * C, pw, py + b * C, pr + b, e - b, C, static_cast<float>(eps));
        });
      });
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
    auto dw_parts = torch::zeros({blocks, C}, x.options().dtype(torch::kFloat32));
    const float *pw = w.data_ptr<float>(), *pr = r.data_ptr<float>();
    float* pdw = dw_parts.data_ptr<float>();
    ForType(x, [&](auto tx) {
      using TX = decltype(tx);
      ForType(dy, [&](auto tg) {
        using TG = decltype(tg);
        if constexpr (std::is_same_v<TX, Bf16> && std::is_same_v<TG, float>) {
          TORCH_CHECK(false, "RmsNorm: bf16 input with an fp32 output is not supported");
        } else {
          const TX* px = Ptr<TX>(x);
          const TG* pdy = Ptr<TG>(dy);
          TX* pdx = Ptr<TX>(dx);
          at::parallel_for(0, blocks, 1, [&](int64_t bb, int64_t be) {
            for (int64_t blk = bb; blk < be; ++blk) {
              const int64_t n0 = blk * kRowBlock, n1 = std::min(N, n0 + kRowBlock);
              simd::RmsNormBackwardRows(px + n0 * C, pw, pr + n0, pdy + n0 * C, pdx + n0 * C, pdw + blk * C,
                                        n1 - n0, C);
            }
          });
        }
      });
    });
    return {dx, dw_parts.sum(0), torch::Tensor(), torch::Tensor()};
  }
};

// ----------------------------------------------------------------------------
// SwiGLU: separate gate and up tensors, or one packed (..., 2F) tensor whose
// first half is the gate (one matmul computes both).

struct SwiGluFn : torch::autograd::Function<SwiGluFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor g, torch::Tensor u) {
    g = g.contiguous();
    u = u.contiguous();
    auto h = torch::empty_like(g);
    ForType(g, [&](auto tag) {
      using T = decltype(tag);
      const T *pg = Ptr<T>(g), *pu = Ptr<T>(u);
      T* ph = Ptr<T>(h);
      at::parallel_for(0, g.numel(), kGrain,
                       [&](int64_t b, int64_t e) { simd::SwiGlu(pg + b, pu + b, ph + b, e - b); });
    });
    ctx->save_for_backward({g, u});
    return h;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto saved = ctx->get_saved_variables();
    auto g = saved[0], u = saved[1];
    auto dh = grads[0].to(g.scalar_type()).contiguous();
    auto dg = torch::empty_like(g), du = torch::empty_like(u);
    ForType(g, [&](auto tag) {
      using T = decltype(tag);
      const T *pg = Ptr<T>(g), *pu = Ptr<T>(u), *pdh = Ptr<T>(dh);
      T *pdg = Ptr<T>(dg), *pdu = Ptr<T>(du);
      at::parallel_for(0, g.numel(), kGrain, [&](int64_t b, int64_t e) {
        simd::SwiGluBackward(pg + b, pu + b, pdh + b, pdg + b, pdu + b, e - b);
      });
    });
    return {dg, du};
  }
};

struct SwiGluPackedFn : torch::autograd::Function<SwiGluPackedFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor gu) {
    gu = gu.contiguous();
    const int64_t F2 = gu.size(-1), F = F2 / 2, rows = gu.numel() / F2;
    auto shape = gu.sizes().vec();
    shape.back() = F;
    auto h = torch::empty(shape, gu.options());
    ForType(gu, [&](auto tag) {
      using T = decltype(tag);
      const T* p = Ptr<T>(gu);
      T* ph = Ptr<T>(h);
      at::parallel_for(0, rows, std::max<int64_t>(1, kGrain / F), [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) simd::SwiGlu(p + r * F2, p + r * F2 + F, ph + r * F, F);
      });
    });
    ctx->save_for_backward({gu});
    return h;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto gu = ctx->get_saved_variables()[0];
    auto dh = grads[0].to(gu.scalar_type()).contiguous();
    const int64_t F2 = gu.size(-1), F = F2 / 2, rows = gu.numel() / F2;
    auto dgu = torch::empty_like(gu);
    ForType(gu, [&](auto tag) {
      using T = decltype(tag);
      const T *p = Ptr<T>(gu), *pdh = Ptr<T>(dh);
      T* pd = Ptr<T>(dgu);
      at::parallel_for(0, rows, std::max<int64_t>(1, kGrain / F), [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          simd::SwiGluBackward(p + r * F2, p + r * F2 + F, pdh + r * F, pd + r * F2, pd + r * F2 + F, F);
        }
      });
    });
    return {dgu};
  }
};

// ----------------------------------------------------------------------------
// Causal softmax: fp32 math, probabilities stored in the scores' type.

struct CausalSoftmaxFn : torch::autograd::Function<CausalSoftmaxFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor s, double scale) {
    s = s.contiguous();
    const int64_t T = s.size(-1), rows = s.numel() / T;
    auto p = torch::empty_like(s);
    ForType(s, [&](auto tag) {
      using T_ = decltype(tag);
      const T_* ps = Ptr<T_>(s);
      T_* pp = Ptr<T_>(p);
      at::parallel_for(0, rows, 64, [&](int64_t b, int64_t e) {
        for (int64_t row = b; row < e; ++row) {
          const int64_t i = row % T;  // query position: sees keys 0..i
          simd::CausalSoftmaxRow(ps + row * T, pp + row * T, i + 1, T, static_cast<float>(scale));
        }
      });
    });
    ctx->save_for_backward({p});
    ctx->saved_data["scale"] = scale;
    return p;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto p = ctx->get_saved_variables()[0];
    const float sc = static_cast<float>(ctx->saved_data["scale"].toDouble());
    auto dp = grads[0].to(p.scalar_type()).contiguous();
    const int64_t T = p.size(-1), rows = p.numel() / T;
    auto ds = torch::empty_like(p);
    ForType(p, [&](auto tag) {
      using T_ = decltype(tag);
      const T_ *pp = Ptr<T_>(p), *pdp = Ptr<T_>(dp);
      T_* pds = Ptr<T_>(ds);
      at::parallel_for(0, rows, 64, [&](int64_t b, int64_t e) {
        for (int64_t row = b; row < e; ++row) {
          simd::CausalSoftmaxBackwardRow(pp + row * T, pdp + row * T, pds + row * T, row % T + 1, T, sc);
        }
      });
    });
    return {ds, torch::Tensor()};
  }
};

// ----------------------------------------------------------------------------
// Head split with RoPE: rows of width `stride` hold `parts` consecutive
// (H*D) tensors (1 for RopeHeads; 3 for packed q|k|v); each part p becomes
// (B, H, T, D), rotated when rotate[p].

tensor_list SplitHeads(const torch::Tensor& x, int64_t parts, int64_t H, const torch::Tensor& cos,
                       const torch::Tensor& sin, const std::vector<bool>& rotate) {
  const int64_t B = x.size(0), T = x.size(1), stride = x.size(2), C = stride / parts, D = C / H, half = D / 2;
  tensor_list out;
  for (int64_t p = 0; p < parts; ++p) out.push_back(torch::empty({B, H, T, D}, x.options()));
  const float *pc = cos.data_ptr<float>(), *ps = sin.data_ptr<float>();
  ForType(x, [&](auto tag) {
    using T_ = decltype(tag);
    const T_* px = Ptr<T_>(x);
    std::vector<T_*> po;
    for (auto& o : out) po.push_back(Ptr<T_>(o));
    at::parallel_for(0, B * T, 8, [&](int64_t b0, int64_t e0) {
      for (int64_t bt = b0; bt < e0; ++bt) {
        const int64_t b = bt / T, t = bt % T;
        for (int64_t p = 0; p < parts; ++p)
          for (int64_t h = 0; h < H; ++h) {
            const T_* xr = px + bt * stride + p * C + h * D;
            T_* yr = po[p] + ((b * H + h) * T + t) * D;
            if (rotate[p]) simd::RopeRow(xr, yr, pc + t * half, ps + t * half, half, 1.0f);
            else simd::CopyRow(xr, yr, D);
          }
      }
    });
  });
  return out;
}

// The backward of SplitHeads: gradients (B, H, T, D) back into rows.
torch::Tensor MergeHeads(const tensor_list& dys, const torch::Tensor& cos, const torch::Tensor& sin,
                         const std::vector<bool>& rotate, torch::ScalarType type) {
  const int64_t parts = static_cast<int64_t>(dys.size());
  const int64_t B = dys[0].size(0), H = dys[0].size(1), T = dys[0].size(2), D = dys[0].size(3), half = D / 2;
  const int64_t C = H * D, stride = parts * C;
  tensor_list gs;
  for (auto& g : dys) gs.push_back(g.defined() ? g.to(type).contiguous() : torch::zeros({B, H, T, D}, cos.options().dtype(type)));
  auto dx = torch::empty({B, T, stride}, gs[0].options());
  const float *pc = cos.data_ptr<float>(), *ps = sin.data_ptr<float>();
  ForType(dx, [&](auto tag) {
    using T_ = decltype(tag);
    T_* pdx = Ptr<T_>(dx);
    std::vector<const T_*> pg;
    for (auto& g : gs) pg.push_back(Ptr<T_>(g));
    at::parallel_for(0, B * T, 8, [&](int64_t b0, int64_t e0) {
      for (int64_t bt = b0; bt < e0; ++bt) {
        const int64_t b = bt / T, t = bt % T;
        for (int64_t p = 0; p < parts; ++p)
          for (int64_t h = 0; h < H; ++h) {
            const T_* gr = pg[p] + ((b * H + h) * T + t) * D;
            T_* dr = pdx + bt * stride + p * C + h * D;
            if (rotate[p]) simd::RopeRow(gr, dr, pc + t * half, ps + t * half, half, -1.0f);
            else simd::CopyRow(gr, dr, D);
          }
      }
    });
  });
  return dx;
}

struct RopeHeadsFn : torch::autograd::Function<RopeHeadsFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, int64_t H, torch::Tensor cos,
                               torch::Tensor sin) {
    x = x.contiguous();
    ctx->save_for_backward({cos, sin});
    return SplitHeads(x, 1, H, cos, sin, {true})[0];
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto saved = ctx->get_saved_variables();
    return {MergeHeads({grads[0]}, saved[0], saved[1], {true}, grads[0].scalar_type()), torch::Tensor(),
            torch::Tensor(), torch::Tensor()};
  }
};

struct QkvHeadsFn : torch::autograd::Function<QkvHeadsFn> {
  static tensor_list forward(AutogradContext* ctx, torch::Tensor qkv, int64_t H, torch::Tensor cos,
                             torch::Tensor sin) {
    qkv = qkv.contiguous();
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["type"] = static_cast<int64_t>(qkv.scalar_type());
    return SplitHeads(qkv, 3, H, cos, sin, {true, true, false});
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto saved = ctx->get_saved_variables();
    auto type = static_cast<torch::ScalarType>(ctx->saved_data["type"].toInt());
    return {MergeHeads(grads, saved[0], saved[1], {true, true, false}, type), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

// ----------------------------------------------------------------------------
// Cross-entropy: logits fp32 or bf16, every sum in fp32 (the mean in fp64).

struct CrossEntropyFn : torch::autograd::Function<CrossEntropyFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor logits, torch::Tensor targets) {
    logits = logits.contiguous();
    targets = targets.contiguous();
    const int64_t N = logits.size(0), V = logits.size(1);
    auto lse = torch::empty({N}, logits.options().dtype(torch::kFloat32));
    auto losses = torch::empty({N}, logits.options().dtype(torch::kFloat64));
    const int64_t* pt = targets.data_ptr<int64_t>();
    float* plse = lse.data_ptr<float>();
    double* ploss = losses.data_ptr<double>();
    ForType(logits, [&](auto tag) {
      using T = decltype(tag);
      const T* pl = Ptr<T>(logits);
      at::parallel_for(0, N, 16, [&](int64_t b, int64_t e) {
        for (int64_t n = b; n < e; ++n) {
          const T* row = pl + n * V;
          plse[n] = simd::LogSumExpRow(row, V);
          float target;
          if constexpr (std::is_same_v<T, float>) target = row[pt[n]];
          else target = static_cast<float>(c10::BFloat16(row[pt[n]].bits, c10::BFloat16::from_bits()));
          ploss[n] = plse[n] - target;
        }
      });
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
    const float* plse = lse.data_ptr<float>();
    const int64_t* pt = targets.data_ptr<int64_t>();
    ForType(logits, [&](auto tag) {
      using T = decltype(tag);
      const T* pl = Ptr<T>(logits);
      T* pd = Ptr<T>(dl);
      at::parallel_for(0, N, 16, [&](int64_t b, int64_t e) {
        for (int64_t n = b; n < e; ++n) simd::CrossEntropyGradRow(pl + n * V, plse[n], g, pt[n], pd + n * V, V);
      });
    });
    return {dl, torch::Tensor()};
  }
};

// ----------------------------------------------------------------------------
// bf16 weights from their fp32 masters (see kernels.h: Bf16Weights)

struct Bf16WeightsFn : torch::autograd::Function<Bf16WeightsFn> {
  // Only the first master is a formal input (it makes the output require
  // grad); the others ride in saved_data: backward writes every master's
  // gradient itself, so autograd needs no edge to them.
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor w16, torch::Tensor a, c10::IValue b,
                               c10::IValue c) {
    ctx->saved_data["a"] = a;
    ctx->saved_data["b"] = b;
    ctx->saved_data["c"] = c;
    return w16.view(w16.sizes());  // a view: the buffer is the weights' bf16 copy
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto g = grads[0].to(torch::kBFloat16).contiguous();
    const bool cpu = g.is_cpu();
    const Bf16* pg = cpu ? Ptr<Bf16>(g) : nullptr;
    auto flat = g.view({-1});
    int64_t offset = 0;
    for (const char* name : {"a", "b", "c"}) {
      auto w = ctx->saved_data[name].toTensor();
      if (!w.defined()) break;
      // The master's gradient is a view of the flat fp32 buffer (params.h):
      // accumulate into it here instead of handing autograd a new tensor.
      auto& grad = w.mutable_grad();
      if (!grad.defined()) grad = torch::zeros_like(w);
      TORCH_CHECK(grad.is_contiguous() && grad.scalar_type() == torch::kFloat32, "Bf16Weights: gradient layout");
      const int64_t n = w.numel();
      if (cpu) {
        float* pw = grad.data_ptr<float>();
        at::parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) { simd::AddBf16ToFloat(pg + offset + b, pw + b, e - b); });
      } else {
        // A device: one mixed-type add per master (fp32 += bf16).
        torch::NoGradGuard no_grad;
        grad.add_(flat.narrow(0, offset, n).view(grad.sizes()));
      }
      offset += n;
    }
    return {torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// ----------------------------------------------------------------------------
// Residual add of a bf16 branch onto the fp32 stream

struct ResidualAddFn : torch::autograd::Function<ResidualAddFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor y) {
    x = x.contiguous();
    y = y.contiguous();
    auto z = torch::empty_like(x);
    const float* px = x.data_ptr<float>();
    const Bf16* py = Ptr<Bf16>(y);
    float* pz = z.data_ptr<float>();
    at::parallel_for(0, x.numel(), kGrain,
                     [&](int64_t b, int64_t e) { simd::AddFloatBf16(px + b, py + b, pz + b, e - b); });
    return z;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto g = grads[0].contiguous();
    auto gy = torch::empty(g.sizes(), g.options().dtype(torch::kBFloat16));
    FloatToBf16(g, gy);
    return {g, gy};
  }
};

}  // namespace

void FloatToBf16(const torch::Tensor& src, torch::Tensor& dst) {
  if (!src.is_cpu()) return eager::FloatToBf16(src, dst);
  TORCH_CHECK(src.is_contiguous() && dst.is_contiguous() && src.numel() == dst.numel() &&
                  src.scalar_type() == torch::kFloat32 && dst.scalar_type() == torch::kBFloat16,
              "FloatToBf16: contiguous float32 -> bfloat16 of equal size");
  const float* ps = src.data_ptr<float>();
  Bf16* pd = Ptr<Bf16>(dst);
  at::parallel_for(0, src.numel(), kGrain, [&](int64_t b, int64_t e) { simd::FloatToBf16(ps + b, pd + b, e - b); });
}

torch::Tensor Bf16Weights(const std::vector<torch::Tensor>& masters, const torch::Tensor& w16) {
  TORCH_CHECK(!masters.empty() && masters.size() <= 3, "Bf16Weights takes one to three masters");
  // Every device: the Function reads w16 and handles the gradient itself.
  torch::Tensor none;
  return Bf16WeightsFn::apply(w16, masters[0], c10::IValue(masters.size() > 1 ? masters[1] : none),
                              c10::IValue(masters.size() > 2 ? masters[2] : none));
}

torch::Tensor ResidualAdd(const torch::Tensor& x, const torch::Tensor& y) {
  if (!x.is_cpu()) return eager::ResidualAdd(x, y);
  if (x.scalar_type() == torch::kFloat32 && y.scalar_type() == torch::kBFloat16) return ResidualAddFn::apply(x, y);
  return x + y;
}

torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps,
                      c10::optional<torch::ScalarType> out) {
#ifdef BULWARK_CUDA_KERNELS
  if (x.is_cuda() && cuda::Enabled()) return cuda::RmsNorm(x, weight, eps, out);
#endif
  if (!x.is_cpu()) return eager::RmsNorm(x, weight, eps, out);
  return RmsNormFn::apply(x, weight, eps, static_cast<int64_t>(out.value_or(x.scalar_type())));
}
torch::Tensor SwiGlu(const torch::Tensor& gate, const torch::Tensor& up) {
  if (!gate.is_cpu()) return eager::SwiGlu(gate, up);
  return SwiGluFn::apply(gate, up);
}
torch::Tensor SwiGluPacked(const torch::Tensor& gate_up) {
#ifdef BULWARK_CUDA_KERNELS
  if (gate_up.is_cuda() && cuda::Enabled()) return cuda::SwiGluPacked(gate_up);
#endif
  if (!gate_up.is_cpu()) return eager::SwiGluPacked(gate_up);
  return SwiGluPackedFn::apply(gate_up);
}
torch::Tensor CausalSoftmax(const torch::Tensor& scores, double scale) {
  if (!scores.is_cpu()) return eager::CausalSoftmax(scores, scale);
  return CausalSoftmaxFn::apply(scores, scale);
}
torch::Tensor CausalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  if (!q.is_cpu()) return eager::CausalAttention(q, k, v);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  return torch::matmul(CausalSoftmax(torch::matmul(q, k.transpose(-2, -1)), scale), v);
}
torch::Tensor RopeHeads(const torch::Tensor& x, int64_t heads, const torch::Tensor& cos, const torch::Tensor& sin) {
  if (!x.is_cpu()) return eager::RopeHeads(x, heads, cos, sin);
  return RopeHeadsFn::apply(x, heads, cos.narrow(0, 0, x.size(1)).contiguous(), sin.narrow(0, 0, x.size(1)).contiguous());
}
std::vector<torch::Tensor> QkvHeads(const torch::Tensor& qkv, int64_t heads, const torch::Tensor& cos,
                                    const torch::Tensor& sin) {
#ifdef BULWARK_CUDA_KERNELS
  if (qkv.is_cuda() && cuda::Enabled()) return cuda::QkvHeads(qkv, heads, cos, sin);
#endif
  if (!qkv.is_cpu()) return eager::QkvHeads(qkv, heads, cos, sin);
  return QkvHeadsFn::apply(qkv, heads, cos.narrow(0, 0, qkv.size(1)).contiguous(),
                           sin.narrow(0, 0, qkv.size(1)).contiguous());
}
torch::Tensor CrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets) {
#ifdef BULWARK_CUDA_KERNELS
  if (logits.is_cuda() && cuda::Enabled()) return cuda::CrossEntropy(logits, targets);
#endif
  if (!logits.is_cpu()) return eager::CrossEntropy(logits, targets);
  return CrossEntropyFn::apply(logits, targets);
}

}  // namespace bulwark::trainer::kernels
