// A LLaMA-style decoder on the libtorch C++ API:
//   token embedding -> n_layers x [RMSNorm -> causal attention with RoPE -> +,
//                                  RMSNorm -> SwiGLU MLP -> +]
//   -> RMSNorm -> untied LM head.
// Shapes: B batch, T time (<= context), C d_model, H heads, D = C/H head dim,
// F ffn width, V vocabulary.
#pragma once

#include <torch/torch.h>

#include "trainer/config.h"
#include "trainer/step/pipeline_plan.h"
#include "trainer/model/poet.h"

namespace bulwark::trainer {

// The type of matmuls and activations between them: bf16 under
// --precision bf16, else fp32. Master weights are always fp32.
torch::ScalarType ComputeType(const ModelConfig& cfg);

// The bf16 copy of a ParamStore's flat fp32 parameters (params.h), which
// bf16 matmuls read instead of casting each weight every step. Re-cast in one
// vectorized pass when the flat buffer's version counter moves (the optimizer
// updates it in place); weights adjacent in the buffer (q|k|v, gate|up) come
// out as one stacked matrix without a copy.
class Bf16Shadow {
 public:
  explicit Bf16Shadow(torch::Tensor flat32);
  void Sync();
  // The bf16 stand-in for `masters` stacked along dim 0 (kernels::Bf16Weights),
  // or an undefined tensor when they are not consecutive in the buffer.
  torch::Tensor Stacked(const std::vector<torch::Tensor>& masters);

 private:
  torch::Tensor flat32_, flat16_;
  int64_t version_ = -1;
};

struct RMSNormImpl : torch::nn::Module {
  explicit RMSNormImpl(int64_t dim, double eps = 1e-5);
  torch::Tensor forward(const torch::Tensor& x);  // (..., C) -> (..., C)
  torch::Tensor forward(const torch::Tensor& x, torch::ScalarType out);  // output in type `out`
  torch::Tensor weight;  // (C), starts at 1
  double eps;
};
TORCH_MODULE(RMSNorm);

// Rotary position embedding in the "rotate half" convention: dimension i of
// the first half pairs with i + D/2. Returns x rotated by position.
// x: (B, H, T, D); cos, sin: (T, D/2).
torch::Tensor ApplyRope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
// cos/sin tables for positions [0, T) with the usual base 10000.
std::pair<torch::Tensor, torch::Tensor> RopeTables(int64_t T, int64_t D, double base = 10000.0);

// A linear layer inside a transformer block, without bias: a plain trained
// weight (AdamW), or under --optimizer poet a PoetLinear whose weight is
// R W0 P. The embedding and LM head are never reparameterized.
struct BlockLinearImpl : torch::nn::Module {
  // `layer` numbers block linears model-wide; POET seeds its draws with it.
  BlockLinearImpl(int64_t in, int64_t out, const ModelConfig& cfg, int64_t layer);
  torch::Tensor forward(const torch::Tensor& x);
  // Draws the initial weight (the model's init, or POET's init for W0).
  void Initialize(at::Generator& gen, const ModelConfig& cfg);
  torch::Tensor weight;         // (out, in); undefined under POET
  PoetLinear poet{nullptr};
  Bf16Shadow* shadow = nullptr;  // set by TransformerImpl::UseBf16Shadow
  int64_t in, out;
};
TORCH_MODULE(BlockLinear);

struct AttentionImpl : torch::nn::Module {
  AttentionImpl(const ModelConfig& cfg, int64_t& layer);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
  BlockLinear wq{nullptr}, wk{nullptr}, wv{nullptr}, wo{nullptr};  // (C, C) each
  int64_t n_heads;
};
TORCH_MODULE(Attention);

struct MlpImpl : torch::nn::Module {
  MlpImpl(const ModelConfig& cfg, int64_t& layer);
  torch::Tensor forward(const torch::Tensor& x);  // down(silu(gate(x)) * up(x))
  BlockLinear gate{nullptr}, up{nullptr};         // (F, C)
  BlockLinear down{nullptr};                      // (C, F)
};
TORCH_MODULE(Mlp);

struct BlockImpl : torch::nn::Module {
  BlockImpl(const ModelConfig& cfg, int64_t& layer);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
  RMSNorm attn_norm{nullptr}, mlp_norm{nullptr};
  torch::ScalarType compute;  // the matmuls' type (ModelConfig::ComputeType)
  Attention attn{nullptr};
  Mlp mlp{nullptr};
};
TORCH_MODULE(Block);

struct TransformerImpl : torch::nn::Module {
  explicit TransformerImpl(const ModelConfig& cfg);
  // idx: (B, T) int64 token ids -> logits (B, T, V)
  torch::Tensor forward(const torch::Tensor& idx);
  // The three parts of forward, for pipeline stages: token embedding (fp32),
  // blocks [first, last) on the fp32 residual stream, final norm + LM head.
  torch::Tensor Embed(const torch::Tensor& idx);
  torch::Tensor Body(torch::Tensor x, int64_t first, int64_t last);
  torch::Tensor Head(const torch::Tensor& x);
  // Mean cross-entropy of next-token prediction; targets (B, T).
  torch::Tensor Loss(const torch::Tensor& idx, const torch::Tensor& targets);
  // Re-draws every weight from `seed` with the configured init.
  void Initialize(uint64_t seed);
  // The POET layers in a fixed order (empty unless --optimizer poet), with
  // their names, for merges and diagnostics.
  std::vector<std::pair<std::string, PoetLinear>> PoetLayers();
  // Folds every POET layer's rotations into its W0 (merge number `count`).
  void MergePoet(uint64_t seed, int64_t count);
  // Under bf16: matmuls read weights from a bf16 copy of `flat32`, the
  // ParamStore's buffer that every parameter now views (call after building
  // the store). Without it each weight is cast on use.
  void UseBf16Shadow(const torch::Tensor& flat32);

  ModelConfig cfg;
  torch::nn::Embedding tok_emb{nullptr};  // (V, C)
  torch::nn::ModuleList blocks;
  RMSNorm final_norm{nullptr};
  torch::nn::Linear lm_head{nullptr};     // (V, C)
  torch::Tensor rope_cos, rope_sin;       // (context, D/2), buffers
  std::shared_ptr<Bf16Shadow> shadow;
};
TORCH_MODULE(Transformer);

int64_t CountParameters(torch::nn::Module& m);

// One pipeline stage's parameters of `model`, by name, in the model's order
// (the embedding on the first stage, the norm and LM head on the last).
std::vector<std::pair<std::string, torch::Tensor>> StageParameters(Transformer& model, const StageLayers& layers);

}  // namespace bulwark::trainer
