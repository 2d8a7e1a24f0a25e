#include "trainer/optim/adamw.h"

#include <torch/version.h>

#include <algorithm>
#include <cmath>

namespace bulwark::trainer {

double LearningRate(int64_t step, int64_t total, int64_t warmup, double peak, double min_ratio) {
  if (step < warmup) return peak * static_cast<double>(step + 1) / static_cast<double>(warmup);
  double span = std::max<int64_t>(1, total - warmup);
  double progress = std::min(1.0, static_cast<double>(step - warmup) / span);
  double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return peak * (min_ratio + (1.0 - min_ratio) * cosine);
}

AdamW::AdamW(ParamStore& store, int64_t begin, int64_t end, AdamWOptions opts)
    : store_(store), begin_(begin), end_(std::max(begin, end)), opts_(opts) {
  // Beside the parameters: the CPU, or a CUDA rank's GPU.
  const auto on = store.params().options();
  m_ = torch::zeros({end_ - begin_}, on);
  v_ = torch::zeros({end_ - begin_}, on);
  // The CPU's update divides through a buffer; a device's is fused.
  denom_ = torch::empty({Fused() ? 0 : end_ - begin_}, on);
}

bool AdamW::Fused() const {
#if TORCH_VERSION_MAJOR >= 2
  return !store_.params().is_cpu();
#else
  return false;
#endif
}

void AdamW::Step(double base_lr, int64_t base_t, double poet_lr, int64_t poet_t) {
  torch::NoGradGuard no_grad;
  // Group by group so that weight decay applies to matrices only; each group
  // is contiguous in the store, so this is at most a few large slices.
  for (const ParamGroup& g : store_.groups()) {
    int64_t b = std::max(g.begin, begin_), e = std::min(g.end, end_);
    if (b >= e) continue;
    const double lr = g.poet ? poet_lr : base_lr;
    const double t = static_cast<double>(g.poet ? poet_t : base_t);
    const double bc1 = 1.0 - std::pow(opts_.beta1, t);
    const double bc2 = 1.0 - std::pow(opts_.beta2, t);
    auto p = store_.params().narrow(0, b, e - b);
    auto grad = store_.grads().narrow(0, b, e - b);
    auto m = m_.narrow(0, b - begin_, e - b);
    auto v = v_.narrow(0, b - begin_, e - b);
#if TORCH_VERSION_MAJOR >= 2
    if (Fused()) {
      // libtorch's fused AdamW (one multi-tensor kernel for the group): the
      // same update (decoupled weight decay, bias-corrected moments) with
      // the step count read from a device tensor, so nothing waits for the
      // host. Not the CPU's bits: the order of operations differs.
      std::vector<torch::Tensor> ps{p}, gs{grad}, ms{m}, vs{v}, none;
      std::vector<torch::Tensor> steps{torch::scalar_tensor(t, p.options())};
      at::_fused_adamw_(ps, gs, ms, vs, none, steps, lr, opts_.beta1, opts_.beta2,
                        g.weight_decay ? opts_.weight_decay : 0.0, opts_.eps, /*amsgrad=*/false, /*maximize=*/false);
      // The bf16 shadow re-casts when the buffer's version moves.
      torch::autograd::impl::bump_version(store_.params());
      continue;
    }
#endif
    auto denom = denom_.narrow(0, b - begin_, e - b);
    m.mul_(opts_.beta1).add_(grad, 1.0 - opts_.beta1);
    v.mul_(opts_.beta2).addcmul_(grad, grad, 1.0 - opts_.beta2);
    torch::sqrt_out(denom, v).div_(std::sqrt(bc2)).add_(opts_.eps);
    if (g.weight_decay && opts_.weight_decay > 0) p.mul_(1.0 - lr * opts_.weight_decay);
    p.addcdiv_(m, denom, -lr / bc1);
  }
}

void AdamW::ResetPoetMoments() {
  const ParamGroup& g = store_.poet_group();
  int64_t b = std::max(g.begin, begin_), e = std::min(g.end, end_);
  if (b >= e) return;
  m_.narrow(0, b - begin_, e - b).zero_();
  v_.narrow(0, b - begin_, e - b).zero_();
}

}  // namespace bulwark::trainer
