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
// Block linears

BlockLinearImpl::BlockLinearImpl(int64_t in, int64_t out, const ModelConfig& cfg, int64_t layer) : in(in), out(out) {
  if (cfg.poet.enabled) {
    poet = register_module("poet", PoetLinear(in, out, cfg.poet, layer));
  } else {
    weight = register_parameter("weight", torch::empty({out, in}));
  }
}

torch::Tensor BlockLinearImpl::forward(const torch::Tensor& x) {
  return poet ? poet->forward(x) : torch::nn::functional::linear(x, weight);
}

void BlockLinearImpl::Initialize(at::Generator& gen, const ModelConfig& cfg) {
  torch::NoGradGuard no_grad;
  auto w = torch::empty({out, in});
  w.normal_(0.0, 0.02, gen);
  const std::string& scheme = poet ? cfg.poet.init : cfg.init;
  if (scheme == "normalized") {
    w.div_(w.norm(2, {1}, /*keepdim=*/true));  // each output neuron unit-norm
  } else if (scheme == "uniform-spectrum") {
    auto usv = torch::linalg::svd(w.to(torch::kFloat64), /*full_matrices=*/false, c10::nullopt);
    w.copy_(torch::matmul(std::get<0>(usv), std::get<2>(usv)).to(torch::kFloat32));  // U V^T: every sigma = 1
  }
  if (poet) {
    poet->SetInitialWeight(w);  // permutations are drawn by the model, from its seed
  } else {
    weight.copy_(w);
  }
}

// ----------------------------------------------------------------------------
// Attention and MLP

AttentionImpl::AttentionImpl(const ModelConfig& cfg, int64_t& layer) : n_heads(cfg.n_heads) {
  auto lin = [&](const char* name) {
    return register_module(name, BlockLinear(cfg.d_model, cfg.d_model, cfg, layer++));
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

MlpImpl::MlpImpl(const ModelConfig& cfg, int64_t& layer) {
  gate = register_module("gate", BlockLinear(cfg.d_model, cfg.ffn, cfg, layer++));
  up = register_module("up", BlockLinear(cfg.d_model, cfg.ffn, cfg, layer++));
  down = register_module("down", BlockLinear(cfg.ffn, cfg.d_model, cfg, layer++));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) { return down(kernels::SwiGlu(gate(x), up(x))); }

BlockImpl::BlockImpl(const ModelConfig& cfg, int64_t& layer) {
  attn_norm = register_module("attn_norm", RMSNorm(cfg.d_model));
  attn = register_module("attn", Attention(cfg, layer));
  mlp_norm = register_module("mlp_norm", RMSNorm(cfg.d_model));
  mlp = register_module("mlp", Mlp(cfg, layer));
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
  int64_t layer = 0;
  for (int i = 0; i < cfg.n_layers; ++i) blocks->push_back(Block(cfg, layer));
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
  // Block linears draw their own weights (plain or POET's W0); everything
  // else is a matrix drawn N(0, 0.02) or a norm gain set to one.
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* lin = m->as<BlockLinear>()) lin->Initialize(gen, cfg);
  }
  for (auto& p : named_parameters()) {
    if (p.key().find(".poet.") != std::string::npos) continue;  // Q starts at zero: R = P = I
    bool block_linear = p.key().rfind("blocks.", 0) == 0 && p.value().dim() == 2;
    if (block_linear) continue;
    if (p.value().dim() == 1) p.value().fill_(1.0f);
    else p.value().normal_(0.0, 0.02, gen);
  }
  for (auto& [name, layer] : PoetLayers()) layer->DrawIndices(seed, 0);
}

std::vector<std::pair<std::string, PoetLinear>> TransformerImpl::PoetLayers() {
  std::vector<std::pair<std::string, PoetLinear>> out;
  for (auto& m : named_modules()) {
    if (auto* lin = m.value()->as<BlockLinear>(); lin && lin->poet) out.emplace_back(m.key(), lin->poet);
  }
  return out;
}

void TransformerImpl::MergePoet(uint64_t seed, int64_t count) {
  for (auto& [name, layer] : PoetLayers()) layer->Merge(seed, count);
}

int64_t CountParameters(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

}  // namespace bulwark::trainer
