// ParamStore: every trainable parameter of a module lives in one flat float
// buffer, and every gradient in another (llm.c's layout).
//
// Why flat: the optimizer updates contiguous ranges instead of dozens of small
// tensors, gradient buckets for the all-reduce are plain slices, a ZeRO-1
// shard is one range [begin, end), and a checkpoint or a checksum is one
// memcpy. Parameters are re-pointed at views of the flat buffer, so the module
// computes exactly as before.
//
// Layout: parameters are ordered by group (weight-decayed matrices, then
// vectors, then POET's rotation parameters), so each group is one contiguous
// range. The gradient buffer has one
// extra slot at index num_params() that carries the step's loss through the
// same all-reduce as the gradients.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

namespace bulwark::trainer {

struct ParamGroup {
  std::string name;    // "decay", "no_decay" or "poet"
  int64_t begin, end;  // element range in the flat buffer
  bool weight_decay;
  bool poet;           // POET's Q: own learning rate, moments reset at merges
};

struct ParamEntry {
  std::string name;
  int64_t offset, numel;
  std::vector<int64_t> shape;
};

class ParamStore {
 public:
  // `padded_to` rounds the parameter buffer's length up to a multiple (the
  // world size, for equal all-gather chunks); the padding is never used.
  ParamStore(torch::nn::Module& module, int64_t padded_to = 1);
  // Only the given parameters (a pipeline stage's share of the model).
  ParamStore(const std::vector<std::pair<std::string, torch::Tensor>>& named, int64_t padded_to = 1);

  int64_t num_params() const { return num_params_; }
  torch::Tensor& params() { return params_; }  // (padded length)
  const torch::Tensor& params() const { return params_; }
  torch::Tensor& grads() { return grads_; }    // (num_params + 1)
  torch::Tensor ParamsView() { return params_.narrow(0, 0, num_params_); }
  torch::Tensor GradsView() { return grads_.narrow(0, 0, num_params_); }
  torch::Tensor LossSlot() { return grads_.narrow(0, num_params_, 1); }
  const std::vector<ParamGroup>& groups() const { return groups_; }
  const ParamGroup& poet_group() const { return groups_.back(); }
  const std::vector<ParamEntry>& entries() const { return entries_; }
  void ZeroGrad() { grads_.zero_(); }
  // Hex checksum of the parameters' bytes, then of `state` (tensors that are
  // not trained but change, like POET's W0): equal iff bitwise equal.
  std::string Checksum(const std::vector<torch::Tensor>& state = {});

 private:
  int64_t num_params_ = 0;
  torch::Tensor params_, grads_;
  std::vector<ParamGroup> groups_;
  std::vector<ParamEntry> entries_;
};

}  // namespace bulwark::trainer
