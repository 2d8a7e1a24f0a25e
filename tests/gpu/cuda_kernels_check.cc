// The fused CUDA kernels (src/trainer/model/kernels_cuda.cu, through
// kernels::cuda) against libtorch's eager ops (kernels::eager), on the GPU.
// For each kernel (RMSNorm, packed SwiGLU, the RoPE head split,
// cross-entropy), fp32 and bf16, at the 88M model's shapes and at odd small
// ones (which take the kernels' one-element paths), it compares outputs and
// input gradients (same random inputs and upstream gradients), checks that
// two runs give the same bits, and times forward + backward of both.
//
//   cuda_kernels_check [--no-timing] [--small]
//
// One line per result; exit status 1 if any comparison or repeat fails.
// The error printed is max |fused - eager| and that divided by max |eager|
// (rel); the limit is on rel: 2e-2 where bf16 is involved, 1e-4 for fp32
// (eager bf16 rounds every intermediate to bf16, the fused kernels only
// their outputs, so bf16 differences are a few bf16 ulps).
// Times are wall-clock per forward + backward, 50 iterations between two
// synchronizes: the small shapes measure launch and autograd overhead only.
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "trainer/model/kernels.h"
#include "trainer/model/kernels_cuda_fns.h"

namespace kernels = bulwark::trainer::kernels;
using torch::Tensor;

namespace {

int failures = 0;
bool timing = true;

const char* Name(torch::ScalarType t) { return t == torch::kBFloat16 ? "bf16" : "f32"; }

std::string Shape(const Tensor& t) {
  std::string s;
  for (int64_t d : t.sizes()) s += (s.empty() ? "" : "x") + std::to_string(d);
  return s;
}

// One comparison line; counts a failure when rel exceeds the limit.
void Compare(const std::string& what, const Tensor& fused, const Tensor& eager, double limit) {
  auto a = fused.to(torch::kFloat64), b = eager.to(torch::kFloat64);
  bool ok = a.sizes() == b.sizes() && fused.scalar_type() == eager.scalar_type();
  double abs = 0, rel = 0;
  if (a.sizes() == b.sizes() && a.numel() > 0) {
    abs = (a - b).abs().max().item<double>();
    const double scale = b.abs().max().item<double>();
    rel = abs / (scale > 0 ? scale : 1.0);
    ok = ok && std::isfinite(abs) && rel <= limit;
  }
  if (fused.scalar_type() != eager.scalar_type()) {
    std::printf("%-48s type %s, eager's %s  FAIL\n", what.c_str(), Name(fused.scalar_type()),
                Name(eager.scalar_type()));
  } else {
    std::printf("%-48s max_abs %.3e  rel %.3e  (limit %.0e)  %s\n", what.c_str(), abs, rel, limit, ok ? "ok" : "FAIL");
  }
  if (!ok) ++failures;
}

// The results of one forward + backward: outputs, then input gradients.
using Run = std::function<std::vector<Tensor>()>;

void Repeatable(const std::string& what, const Run& run) {
  auto a = run(), b = run();
  bool same = a.size() == b.size();
  for (size_t i = 0; same && i < a.size(); ++i) same = torch::equal(a[i], b[i]);
  std::printf("%-48s %s\n", (what + " repeat").c_str(), same ? "bitwise equal  ok" : "DIFFERS  FAIL");
  if (!same) ++failures;
}

double Millis(const Run& run, int iters) {
  for (int i = 0; i < 5; ++i) run();
  torch::cuda::synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) run();
  torch::cuda::synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / iters;
}

void Time(const std::string& what, const Run& fused, const Run& eager) {
  if (!timing) return;
  const double f = Millis(fused, 50), e = Millis(eager, 50);
  std::printf("%-48s fused %.3f ms  eager %.3f ms  eager/fused %.2fx\n", (what + " fwd+bwd").c_str(), f, e, e / f);
}

// Compares every tensor of two runs, names given in order.
void CompareAll(const std::string& what, const std::vector<std::string>& names, const std::vector<Tensor>& fused,
                const std::vector<Tensor>& eager, double limit) {
  for (size_t i = 0; i < names.size(); ++i) Compare(what + " " + names[i], fused[i], eager[i], limit);
}

// The public entry point (kernels::X) must route a CUDA tensor to the fused kernel.
void Dispatched(const std::string& what, const char* name, bool same) {
  std::printf("%-48s kernels::%s %s\n", (what + " dispatch").c_str(), name,
              same ? "is fused  ok" : "is NOT FUSED  FAIL");
  if (!same) ++failures;
}

Tensor Leaf(const Tensor& t) { return t.detach().clone().requires_grad_(true); }

// ----------------------------------------------------------------------------

void CheckRmsNorm(std::vector<int64_t> shape, torch::ScalarType in, torch::ScalarType out) {
  auto opt = torch::TensorOptions().device(torch::kCUDA);
  const int64_t C = shape.back();
  auto x0 = torch::randn(shape, opt).to(in);
  auto w0 = 1.0 + 0.1 * torch::randn({C}, opt);
  auto dy = torch::randn(shape, opt).to(out);
  const double eps = 1e-5;
  auto make = [&](bool fused) -> Run {
    return [=] {
      auto x = Leaf(x0), w = Leaf(w0);
      auto y = fused ? kernels::cuda::RmsNorm(x, w, eps, out) : kernels::eager::RmsNorm(x, w, eps, out);
      auto g = torch::autograd::grad({y}, {x, w}, {dy});
      return std::vector<Tensor>{y, g[0], g[1]};
    };
  };
  const std::string what = std::string("rmsnorm ") + Shape(x0) + " " + Name(in) + "->" + Name(out);
  const double limit = in == torch::kFloat32 && out == torch::kFloat32 ? 1e-4 : 2e-2;
  auto fused = make(true)(), eager = make(false)();
  CompareAll(what, {"y", "dx", "dweight"}, fused, eager, limit);
  Repeatable(what, make(true));
  if (kernels::cuda::Enabled()) {
    auto y = kernels::RmsNorm(x0, w0, eps, out);
    const bool same = torch::equal(y, fused[0].detach());
    Dispatched(what, "RmsNorm", same);
  }
  Time(what, make(true), make(false));
}

void CheckSwiGlu(std::vector<int64_t> shape, torch::ScalarType type) {
  auto opt = torch::TensorOptions().device(torch::kCUDA);
  auto gu0 = (2.0 * torch::randn(shape, opt)).to(type);
  auto hshape = shape;
  hshape.back() /= 2;
  auto dh = torch::randn(hshape, opt).to(type);
  auto make = [&](bool fused) -> Run {
    return [=] {
      auto gu = Leaf(gu0);
      auto h = fused ? kernels::cuda::SwiGluPacked(gu) : kernels::eager::SwiGluPacked(gu);
      auto g = torch::autograd::grad({h}, {gu}, {dh});
      return std::vector<Tensor>{h, g[0]};
    };
  };
  const std::string what = std::string("swiglu ") + Shape(gu0) + " " + Name(type);
  const double limit = type == torch::kFloat32 ? 1e-4 : 2e-2;
  CompareAll(what, {"h", "dgate_up"}, make(true)(), make(false)(), limit);
  Repeatable(what, make(true));
  if (kernels::cuda::Enabled()) {
    const bool same = torch::equal(kernels::SwiGluPacked(gu0), make(true)()[0]);
    Dispatched(what, "SwiGluPacked", same);
  }
  Time(what, make(true), make(false));
}

void CheckQkv(int64_t B, int64_t T, int64_t H, int64_t D, torch::ScalarType type) {
  auto opt = torch::TensorOptions().device(torch::kCUDA);
  // Tables longer than T (the model's hold its context): the first T rows.
  const int64_t T2 = T + 3, half = D / 2;
  auto pos = torch::arange(T2, opt.dtype(torch::kFloat32)).unsqueeze(1);
  auto freq = torch::pow(10000.0, -torch::arange(half, opt.dtype(torch::kFloat32)) / static_cast<double>(half));
  auto angle = pos * freq.unsqueeze(0);
  auto cos = angle.cos(), sin = angle.sin();
  auto qkv0 = torch::randn({B, T, 3 * H * D}, opt).to(type);
  // Upstream gradients as attention's backward may leave them: dq a strided
  // view (of a (B, T, H, D) tensor), dk and dv contiguous.
  auto gq = torch::randn({B, T, H, D}, opt).to(type).transpose(1, 2);
  auto gk = torch::randn({B, H, T, D}, opt).to(type), gv = torch::randn({B, H, T, D}, opt).to(type);
  auto make = [&](bool fused) -> Run {
    return [=] {
      auto qkv = Leaf(qkv0);
      auto out = fused ? kernels::cuda::QkvHeads(qkv, H, cos, sin) : kernels::eager::QkvHeads(qkv, H, cos, sin);
      auto g = torch::autograd::grad({out[0], out[1], out[2]}, {qkv}, {gq, gk, gv});
      return std::vector<Tensor>{out[0], out[1], out[2], g[0]};
    };
  };
  const std::string what = "qkv_heads " + Shape(qkv0) + " H" + std::to_string(H) + " " + Name(type);
  const double limit = type == torch::kFloat32 ? 1e-4 : 2e-2;
  auto fused = make(true)();
  CompareAll(what, {"q", "k", "v", "dqkv"}, fused, make(false)(), limit);
  // v is only moved: bitwise.
  const bool v_same = torch::equal(fused[2], make(false)()[2].contiguous());
  std::printf("%-48s %s\n", (what + " v exact").c_str(), v_same ? "bitwise equal  ok" : "DIFFERS  FAIL");
  if (!v_same) ++failures;
  Repeatable(what, make(true));
  if (kernels::cuda::Enabled()) {
    const bool same = torch::equal(kernels::QkvHeads(qkv0, H, cos, sin)[0], fused[0].detach());
    Dispatched(what, "QkvHeads", same);
  }
  Time(what, make(true), make(false));
}

void CheckCrossEntropy(int64_t N, int64_t V, torch::ScalarType type) {
  auto opt = torch::TensorOptions().device(torch::kCUDA);
  auto logits0 = (3.0 * torch::randn({N, V}, opt)).to(type);
  auto targets = torch::randint(V, {N}, opt.dtype(torch::kLong));
  auto dloss = torch::full({}, 0.7, opt);  // upstream gradient of the mean
  auto make = [&](bool fused) -> Run {
    return [=] {
      auto logits = Leaf(logits0);
      auto loss = fused ? kernels::cuda::CrossEntropy(logits, targets) : kernels::eager::CrossEntropy(logits, targets);
      auto g = torch::autograd::grad({loss}, {logits}, {dloss});
      return std::vector<Tensor>{loss, g[0]};
    };
  };
  const std::string what = "cross_entropy " + Shape(logits0) + " " + Name(type);
  const double limit = type == torch::kFloat32 ? 1e-4 : 2e-2;
  auto fused = make(true)();
  CompareAll(what, {"loss", "dlogits"}, fused, make(false)(), limit);
  Repeatable(what, make(true));
  if (kernels::cuda::Enabled()) {
    const bool same = torch::equal(kernels::CrossEntropy(logits0, targets), fused[0].detach());
    Dispatched(what, "CrossEntropy", same);
  }
  Time(what, make(true), make(false));
}

}  // namespace

int main(int argc, char** argv) {
  bool small_only = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--no-timing")) timing = false;
    else if (!std::strcmp(argv[i], "--small")) small_only = true;
    else {
      std::fprintf(stderr, "usage: %s [--no-timing] [--small]\n", argv[0]);
      return 2;
    }
  }
  if (!torch::cuda::is_available()) {
    std::printf("cuda_kernels_check: no CUDA device  FAIL\n");
    return 1;
  }
  torch::manual_seed(1234);
  std::printf("kernels::cuda::Enabled() = %d (BULWARK_CUDA_KERNELS=%s)\n", kernels::cuda::Enabled() ? 1 : 0,
              std::getenv("BULWARK_CUDA_KERNELS") ? std::getenv("BULWARK_CUDA_KERNELS") : "unset");
  const auto f32 = torch::kFloat32, bf16 = torch::kBFloat16;
  try {
    // The model's: the fp32 residual in, the compute type out; B 16, T 1024, C 768.
    using Types = std::pair<torch::ScalarType, torch::ScalarType>;
    for (auto io : std::vector<Types>{{f32, bf16}, {bf16, bf16}, {f32, f32}}) {
      if (!small_only) CheckRmsNorm({16, 1024, 768}, io.first, io.second);
      CheckRmsNorm({7, 40}, io.first, io.second);
      CheckRmsNorm({5, 37}, io.first, io.second);  // C % 4 != 0: one element at a time
      CheckRmsNorm({3, 70, 96}, io.first, io.second);  // more rows than one weight-gradient block
    }
    for (auto t : {bf16, f32}) {
      if (!small_only) CheckSwiGlu({16, 1024, 2 * 2048}, t);
      CheckSwiGlu({7, 2 * 20}, t);
      CheckSwiGlu({5, 2 * 19}, t);
    }
    for (auto t : {bf16, f32}) {
      if (!small_only) CheckQkv(16, 1024, 12, 64, t);
      CheckQkv(2, 7, 3, 8, t);
      CheckQkv(2, 5, 2, 6, t);  // D/2 odd: one element at a time
    }
    for (auto t : {bf16, f32}) {
      if (!small_only) CheckCrossEntropy(16 * 1024, 2048, t);  // the 88M model's logits
      CheckCrossEntropy(7, 40, t);
      CheckCrossEntropy(5, 37, t);  // V % 4 != 0: one element at a time
    }
  } catch (const std::exception& e) {
    std::printf("cuda_kernels_check: exception: %s  FAIL\n", e.what());
    return 1;
  }
  std::printf("cuda_kernels_check: %s (%d failure%s)\n", failures ? "FAIL" : "ok", failures, failures == 1 ? "" : "s");
  return failures ? 1 : 0;
}
