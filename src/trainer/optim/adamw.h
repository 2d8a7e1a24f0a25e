// AdamW over a range of a ParamStore's flat buffer.
//
// Unsharded, the range is every parameter and each rank keeps the whole
// state (two floats per parameter). With --shard-optimizer (ZeRO-1) rank r of
// W owns part r of the flat buffer (ChunkOf, dist.h): it keeps m and v only
// for that range, updates only those parameters, and the ranks all-gather the result.
#pragma once

#include <torch/torch.h>

#include "trainer/model/params.h"

namespace bulwark::trainer {

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

// The cosine schedule with linear warmup: lr(step) for the step about to run.
double LearningRate(int64_t step, int64_t total, int64_t warmup, double peak, double min_ratio);

class AdamW {
 public:
  AdamW(ParamStore& store, int64_t begin, int64_t end, AdamWOptions opts);

  // One update of the owned range with the gradients in the store. `t` is
  // the 1-based count of updates so far, for bias correction; POET's group
  // has its own learning rate and count (updates since its last merge).
  void Step(double lr, int64_t t, double poet_lr = 0, int64_t poet_t = 1);
  // Zeroes the moments of POET's group (merge-then-reinitialize).
  void ResetPoetMoments();

  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }
  torch::Tensor& m() { return m_; }  // (end - begin)
  torch::Tensor& v() { return v_; }
  const torch::Tensor& m() const { return m_; }
  const torch::Tensor& v() const { return v_; }

 private:
  // True on a device with libtorch's fused AdamW (2.x): Step runs it there.
  bool Fused() const;

  ParamStore& store_;
  int64_t begin_, end_;
  AdamWOptions opts_;
  torch::Tensor m_, v_, denom_;
};

}  // namespace bulwark::trainer
