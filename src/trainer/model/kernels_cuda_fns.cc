// kernels::cuda (kernels_cuda_fns.h): the launchers of kernels_cuda.cu as
// autograd Functions, on the current CUDA stream of the tensors' device.
// Compiled only when the build has the kernels (BULWARK_CUDA_KERNELS).
#include "trainer/model/kernels_cuda_fns.h"

#include <c10/core/DeviceGuard.h>

#include <cstdlib>
#include <cstring>

// PyTorch's current stream (the default stream unless someone set another).
// CUDA's headers must be on the include path too: c10/cuda includes them.
// Without either (a CPU libtorch: only a syntax check), the default stream.
#if __has_include(<c10/cuda/CUDAStream.h>) && __has_include(<cuda_runtime_api.h>)
#include <c10/cuda/CUDAStream.h>
#define BULWARK_HAS_C10_CUDA 1
#endif

#include "trainer/model/kernels.h"
#include "trainer/model/kernels_cuda.h"

namespace bulwark::trainer::kernels::cuda {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

raw::Stream StreamOf(const torch::Tensor& t) {
#ifdef BULWARK_HAS_C10_CUDA
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
#else
  (void)t;
  return nullptr;
#endif
}

bool Supported(const torch::Tensor& t) {
  return t.is_cuda() && (t.scalar_type() == torch::kFloat32 || t.scalar_type() == torch::kBFloat16);
}

raw::DType TypeOf(const torch::Tensor& t) {
  TORCH_CHECK(t.scalar_type() == torch::kFloat32 || t.scalar_type() == torch::kBFloat16,
              "fused CUDA kernels take float32 or bfloat16, not ", t.scalar_type());
  return t.scalar_type() == torch::kBFloat16 ? raw::DType::kBF16 : raw::DType::kF32;
}

void Check(const char* error, const char* what) { TORCH_CHECK(error == nullptr, what, ": ", error); }

// ----------------------------------------------------------------------------
// RMSNorm: statistics in fp32, y in `out_type`, the weight's gradient fp32.

struct RmsNormFn : torch::autograd::Function<RmsNormFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor w, double eps,
                               int64_t out_type) {
    c10::DeviceGuard guard(x.device());
    x = x.contiguous();
    auto wf = w.to(x.device(), torch::kFloat32).contiguous();
    const int64_t C = x.size(-1), N = x.numel() / C;
    TORCH_CHECK(wf.numel() == C, "RmsNorm: weight of ", wf.numel(), " for rows of ", C);
    auto y = torch::empty(x.sizes(), x.options().dtype(static_cast<torch::ScalarType>(out_type)));
    auto r = torch::empty({N}, x.options().dtype(torch::kFloat32));
    Check(raw::RmsNormForward(x.data_ptr(), TypeOf(x), wf.data_ptr<float>(), y.data_ptr(), TypeOf(y),
                              r.data_ptr<float>(), N, C, static_cast<float>(eps), StreamOf(x)),
          "RmsNorm");
    ctx->save_for_backward({x, wf, r});
    return y;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto saved = ctx->get_saved_variables();
    auto x = saved[0], w = saved[1], r = saved[2];
    c10::DeviceGuard guard(x.device());
    auto dy = grads[0].contiguous();
    const int64_t C = x.size(-1), N = x.numel() / C;
    auto dx = torch::empty_like(x, at::MemoryFormat::Contiguous);
    auto dw = torch::empty({C}, x.options().dtype(torch::kFloat32));
    auto partials = torch::empty({raw::RmsNormPartials(N), C}, x.options().dtype(torch::kFloat32));
    Check(raw::RmsNormBackward(dy.data_ptr(), TypeOf(dy), x.data_ptr(), TypeOf(x), w.data_ptr<float>(),
                               r.data_ptr<float>(), dx.data_ptr(), dw.data_ptr<float>(), partials.data_ptr<float>(), N,
                               C, StreamOf(x)),
          "RmsNorm backward");
    return {dx, dw, torch::Tensor(), torch::Tensor()};
  }
};

// ----------------------------------------------------------------------------
// SwiGLU on a packed (..., 2F) gate|up tensor.

struct SwiGluPackedFn : torch::autograd::Function<SwiGluPackedFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor gu) {
    c10::DeviceGuard guard(gu.device());
    gu = gu.contiguous();
    const int64_t F2 = gu.size(-1), F = F2 / 2, rows = F2 == 0 ? 0 : gu.numel() / F2;
    TORCH_CHECK(F2 % 2 == 0 && F > 0, "SwiGluPacked: last dimension ", F2, " is not 2F");
    auto shape = gu.sizes().vec();
    shape.back() = F;
    auto h = torch::empty(shape, gu.options());
    Check(raw::SwiGluPackedForward(gu.data_ptr(), h.data_ptr(), TypeOf(gu), rows, F, StreamOf(gu)), "SwiGluPacked");
    ctx->save_for_backward({gu});
    return h;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto gu = ctx->get_saved_variables()[0];
    c10::DeviceGuard guard(gu.device());
    auto dh = grads[0].to(gu.scalar_type()).contiguous();
    const int64_t F2 = gu.size(-1), F = F2 / 2, rows = gu.numel() / F2;
    auto dgu = torch::empty_like(gu, at::MemoryFormat::Contiguous);
    Check(raw::SwiGluPackedBackward(gu.data_ptr(), dh.data_ptr(), dgu.data_ptr(), TypeOf(gu), rows, F, StreamOf(gu)),
          "SwiGluPacked backward");
    return {dgu};
  }
};

// ----------------------------------------------------------------------------
// q|k|v (B, T, 3*H*D) -> q, k, v (B, H, T, D), q and k rotated. cos and sin
// arrive as fp32 (T, D/2), contiguous, on qkv's device.

struct QkvHeadsFn : torch::autograd::Function<QkvHeadsFn> {
  static tensor_list forward(AutogradContext* ctx, torch::Tensor qkv, int64_t H, torch::Tensor cos,
                             torch::Tensor sin) {
    c10::DeviceGuard guard(qkv.device());
    qkv = qkv.contiguous();
    TORCH_CHECK(qkv.dim() == 3 && qkv.size(2) % (3 * H) == 0, "QkvHeads: (B, T, 3*H*D) expected, got ", qkv.sizes());
    const int64_t B = qkv.size(0), T = qkv.size(1), D = qkv.size(2) / (3 * H);
    TORCH_CHECK(D % 2 == 0 && cos.size(0) == T && cos.size(1) == D / 2 && sin.sizes() == cos.sizes(),
                "QkvHeads: tables (T, D/2) = (", T, ", ", D / 2, ") expected, got ", cos.sizes());
    tensor_list out;
    for (int i = 0; i < 3; ++i) out.push_back(torch::empty({B, H, T, D}, qkv.options()));
    Check(raw::QkvHeadsForward(qkv.data_ptr(), out[0].data_ptr(), out[1].data_ptr(), out[2].data_ptr(), TypeOf(qkv),
                               cos.data_ptr<float>(), sin.data_ptr<float>(), B, T, H, D, StreamOf(qkv)),
          "QkvHeads");
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["type"] = static_cast<int64_t>(qkv.scalar_type());
    ctx->saved_data["shape"] = std::vector<int64_t>{B, T, H, D};
    return out;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto saved = ctx->get_saved_variables();
    auto cos = saved[0], sin = saved[1];
    c10::DeviceGuard guard(cos.device());
    const auto type = static_cast<torch::ScalarType>(ctx->saved_data["type"].toInt());
    const auto shape = ctx->saved_data["shape"].toIntVector();
    const int64_t B = shape[0], T = shape[1], H = shape[2], D = shape[3];
    // Gradients from autograd may be strided views (of a transpose): the
    // kernel reads contiguous (B, H, T, D). An undefined one reads as zeros.
    tensor_list g;
    const void* p[3];
    for (int i = 0; i < 3; ++i) {
      g.push_back(grads[i].defined() ? grads[i].to(type).contiguous() : torch::Tensor());
      p[i] = g[i].defined() ? g[i].data_ptr() : nullptr;
    }
    auto dqkv = torch::empty({B, T, 3 * H * D}, cos.options().dtype(type));
    Check(raw::QkvHeadsBackward(p[0], p[1], p[2], dqkv.data_ptr(), TypeOf(dqkv), cos.data_ptr<float>(),
                                sin.data_ptr<float>(), B, T, H, D, StreamOf(dqkv)),
          "QkvHeads backward");
    return {dqkv, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// ----------------------------------------------------------------------------
// Cross-entropy: the mean over rows in fp64, in a fixed order; the upstream
// gradient read on the device (no synchronization).

struct CrossEntropyFn : torch::autograd::Function<CrossEntropyFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor logits, torch::Tensor targets) {
    c10::DeviceGuard guard(logits.device());
    logits = logits.contiguous();
    targets = targets.to(logits.device(), torch::kLong).contiguous();
    const int64_t N = logits.size(0), V = logits.size(1);
    TORCH_CHECK(targets.numel() == N, "CrossEntropy: ", targets.numel(), " targets for ", N, " rows");
    auto f32 = logits.options().dtype(torch::kFloat32);
    auto lse = torch::empty({N}, f32), losses = torch::empty({N}, f32), loss = torch::empty({}, f32);
    Check(raw::CrossEntropyForward(logits.data_ptr(), TypeOf(logits), targets.data_ptr<int64_t>(),
                                   lse.data_ptr<float>(), losses.data_ptr<float>(), loss.data_ptr<float>(), N, V,
                                   StreamOf(logits)),
          "CrossEntropy");
    ctx->save_for_backward({logits, targets, lse});
    return loss;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto saved = ctx->get_saved_variables();
    auto logits = saved[0], targets = saved[1], lse = saved[2];
    c10::DeviceGuard guard(logits.device());
    auto g = grads[0].to(logits.device(), torch::kFloat32).contiguous();
    const int64_t N = logits.size(0), V = logits.size(1);
    auto dl = torch::empty_like(logits, at::MemoryFormat::Contiguous);
    Check(raw::CrossEntropyBackward(logits.data_ptr(), TypeOf(logits), targets.data_ptr<int64_t>(),
                                    lse.data_ptr<float>(), g.data_ptr<float>(), dl.data_ptr(), N, V, StreamOf(logits)),
          "CrossEntropy backward");
    return {dl, torch::Tensor()};
  }
};

}  // namespace

bool Enabled() {
  static const bool on = [] {
    const char* v = std::getenv("BULWARK_CUDA_KERNELS");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

// Anything the kernels do not take (another type, a CPU tensor, rows longer
// than the weight gradient's shared memory holds) runs the eager ops.
torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps,
                      c10::optional<torch::ScalarType> out) {
  const auto type = out.value_or(x.scalar_type());
  if (!Supported(x) || (type != torch::kFloat32 && type != torch::kBFloat16) || x.dim() == 0 || x.size(-1) == 0 ||
      x.size(-1) > 12288) {
    return eager::RmsNorm(x, weight, eps, out);
  }
  return RmsNormFn::apply(x, weight, eps, static_cast<int64_t>(type));
}

torch::Tensor SwiGluPacked(const torch::Tensor& gate_up) {
  if (!Supported(gate_up) || gate_up.dim() == 0 || gate_up.size(-1) == 0 || gate_up.size(-1) % 2 != 0) {
    return eager::SwiGluPacked(gate_up);
  }
  return SwiGluPackedFn::apply(gate_up);
}

std::vector<torch::Tensor> QkvHeads(const torch::Tensor& qkv, int64_t heads, const torch::Tensor& cos,
                                    const torch::Tensor& sin) {
  if (!Supported(qkv) || qkv.dim() != 3 || heads <= 0 || qkv.size(2) % (3 * heads) != 0 ||
      (qkv.size(2) / (3 * heads)) % 2 != 0) {
    return eager::QkvHeads(qkv, heads, cos, sin);
  }
  const int64_t T = qkv.size(1);
  auto table = [&](const torch::Tensor& t) { return t.narrow(0, 0, T).to(qkv.device(), torch::kFloat32).contiguous(); };
  return QkvHeadsFn::apply(qkv, heads, table(cos), table(sin));
}

torch::Tensor CrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets) {
  if (!Supported(logits) || logits.dim() != 2 || logits.size(0) == 0 || logits.size(1) == 0 ||
      logits.size(0) > 0x7fffffff || logits.size(1) > 0x7fffffff) {
    return eager::CrossEntropy(logits, targets);
  }
  return CrossEntropyFn::apply(logits, targets);
}

}  // namespace bulwark::trainer::kernels::cuda
