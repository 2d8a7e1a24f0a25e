#include "trainer/model.h"

#include <cmath>

#include "trainer/kernels.h"

namespace bulwark::trainer {
namespace F = torch::nn::functional;

// ----------------------------------------------------------------------------
// RMSNorm

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) { return kernels::RmsNorm(x, weight, eps); }

// ----------------------------------------------------------------------------
// Rotary position embedding

std::pair<torch::Tensor, torch::Tensor> RopeTables(int64_t T, int64_t D, double base) {
  auto inv_freq = torch::pow(base, -torch::arange(0, D, 2, torch::kFloat64) / static_cast<double>(D));  // (D/2)
  auto pos = torch::arange(T, torch::kFloat64).unsqueeze(1);                                          // (T, 1)
  auto angle = pos * inv_freq.unsqueeze(0);                                                          // (T, D/2)
  return {angle.cos().to(torch::kFloat32), angle.sin().to(torch::kFloat32)};
}

torch::Tensor ApplyRope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t T = x.size(2), half = x.size(3) / 2;
  auto c = cos.narrow(0, 0, T), s = sin.narrow(0, 0, T);  // (T, D/2), broadcast over B, H
  auto x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  return torch::cat({x1 * c - x2 * s, x1 * s + x2 * c}, -1);
}

// ----------------------------------------------------------------------------
// Attention and MLP

AttentionImpl::AttentionImpl(const ModelConfig& cfg) : n_heads(cfg.n_heads) {
  auto lin = [&](const char* name) {
    return register_module(name, torch::nn::Linear(torch::nn::LinearOptions(cfg.d_model, cfg.d_model).bias(false)));
  };
  wq = lin("wq");
  wk = lin("wk");
  wv = lin("wv");
  wo = lin("wo");
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), H = n_heads, D = C / H;
  auto q = kernels::RopeHeads(wq(x), H, cos, sin);  // (B, H, T, D)
  auto k = kernels::RopeHeads(wk(x), H, cos, sin);
  auto v = wv(x).view({B, T, H, D}).transpose(1, 2);
  // Scores (B, H, T, T); the softmax scales and masks positions j > i.
  auto att = kernels::CausalSoftmax(torch::matmul(q, k.transpose(-2, -1)), 1.0 / std::sqrt(static_cast<double>(D)));
  auto y = torch::matmul(att, v).transpose(1, 2).contiguous().view({B, T, C});
  return wo(y);
}

MlpImpl::MlpImpl(const ModelConfig& cfg) {
  gate = register_module("gate", torch::nn::Linear(torch::nn::LinearOptions(cfg.d_model, cfg.ffn).bias(false)));
  up = register_module("up", torch::nn::Linear(torch::nn::LinearOptions(cfg.d_model, cfg.ffn).bias(false)));
  down = register_module("down", torch::nn::Linear(torch::nn::LinearOptions(cfg.ffn, cfg.d_model).bias(false)));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) { return down(kernels::SwiGlu(gate(x), up(x))); }

BlockImpl::BlockImpl(const ModelConfig& cfg) {
  attn_norm = register_module("attn_norm", RMSNorm(cfg.d_model));
  attn = register_module("attn", Attention(cfg));
  mlp_norm = register_module("mlp_norm", RMSNorm(cfg.d_model));
  mlp = register_module("mlp", Mlp(cfg));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  auto h = x + attn(attn_norm(x), cos, sin);
  return h + mlp(mlp_norm(h));
}

// ----------------------------------------------------------------------------
// The model

TransformerImpl::TransformerImpl(const ModelConfig& c) : cfg(c) {
  tok_emb = register_module("tok_emb", torch::nn::Embedding(cfg.vocab_size, cfg.d_model));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int i = 0; i < cfg.n_layers; ++i) blocks->push_back(Block(cfg));
  final_norm = register_module("final_norm", RMSNorm(cfg.d_model));
  lm_head = register_module("lm_head", torch::nn::Linear(torch::nn::LinearOptions(cfg.d_model, cfg.vocab_size).bias(false)));
  std::tie(rope_cos, rope_sin) = RopeTables(cfg.context, cfg.head_dim());
  rope_cos = register_buffer("rope_cos", rope_cos);
  rope_sin = register_buffer("rope_sin", rope_sin);
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& idx) {
  auto x = tok_emb(idx);  // (B, T, C)
  for (auto& b : *blocks) x = b->as<Block>()->forward(x, rope_cos, rope_sin);
  return lm_head(final_norm(x));  // (B, T, V)
}

torch::Tensor TransformerImpl::Loss(const torch::Tensor& idx, const torch::Tensor& targets) {
  auto logits = forward(idx);
  return kernels::CrossEntropy(logits.view({-1, logits.size(-1)}), targets.reshape({-1}));
}

void TransformerImpl::Initialize(uint64_t seed) {
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(seed);
  for (auto& p : named_parameters()) {
    auto& t = p.value();
    if (t.dim() == 1) {
      t.fill_(1.0f);  // norm gains
      continue;
    }
    t.normal_(0.0, 0.02, gen);
    // Normalized init (POET's default for W0) applies to the block linears;
    // embeddings and the LM head keep the standard draw.
    bool block_linear = p.key().rfind("blocks.", 0) == 0;
    if (cfg.init == "normalized" && block_linear) t.div_(t.norm(2, {1}, /*keepdim=*/true));
  }
}

int64_t CountParameters(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

}  // namespace bulwark::trainer
