#include "trainer/model/model.h"

#include <cmath>
#include <cstdlib>

#include "trainer/model/kernels.h"

namespace bulwark::trainer {
namespace F = torch::nn::functional;

torch::ScalarType ComputeType(const ModelConfig& cfg) { return cfg.bf16 ? torch::kBFloat16 : torch::kFloat32; }

// ----------------------------------------------------------------------------
// bf16 shadow of the flat parameters

Bf16Shadow::Bf16Shadow(torch::Tensor flat32)
    : flat32_(std::move(flat32)), flat16_(torch::empty(flat32_.sizes(), flat32_.options().dtype(torch::kBFloat16))) {}

void Bf16Shadow::Sync() {
  if (flat32_._version() == version_) return;
  kernels::FloatToBf16(flat32_, flat16_);
  version_ = flat32_._version();
}

torch::Tensor Bf16Shadow::Stacked(const std::vector<torch::Tensor>& masters) {
  const float* base = flat32_.data_ptr<float>();
  const float* p = masters[0].data_ptr<float>();
  if (p < base || p >= base + flat32_.numel()) return {};
  const int64_t offset = p - base;
  int64_t rows = 0, total = 0;
  for (const auto& m : masters) {
    if (m.data_ptr<float>() != base + offset + total || !m.is_contiguous()) return {};
    rows += m.size(0);
    total += m.numel();
  }
  return kernels::Bf16Weights(masters, flat16_.narrow(0, offset, total).view({rows, masters[0].size(1)}));
}

// ----------------------------------------------------------------------------
// RMSNorm

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) { return kernels::RmsNorm(x, weight, eps); }
torch::Tensor RMSNormImpl::forward(const torch::Tensor& x, torch::ScalarType out) {
  return kernels::RmsNorm(x, weight, eps, out);
}

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
  // The fp32 master weight cast to the activations' type: under bf16 the
  // cast's backward turns the bf16 weight gradient back into fp32 and
  // accumulates it into the flat gradient buffer.
  if (poet) return poet->forward(x);
  if (shadow && x.scalar_type() == torch::kBFloat16) {
    if (auto w = shadow->Stacked({weight}); w.defined()) return torch::nn::functional::linear(x, w);
  }
  return torch::nn::functional::linear(x, weight.to(x.scalar_type()));
}

// One matmul for several linears of the same input: their weights stacked
// (a copy of 3C x C or 2F x C floats, cheap beside the matmul it saves).
// POET layers each form their own weight, so they run one by one.
torch::Tensor StackedLinear(const torch::Tensor& x, std::initializer_list<BlockLinear> layers) {
  std::vector<torch::Tensor> parts;
  if ((*layers.begin())->poet) {
    for (auto l : layers) parts.push_back(l->forward(x));
    return torch::cat(parts, -1);
  }
  for (const auto& l : layers) parts.push_back(l->weight);
  Bf16Shadow* shadow = (*layers.begin())->shadow;
  if (shadow && x.scalar_type() == torch::kBFloat16) {
    if (auto w = shadow->Stacked(parts); w.defined()) return torch::nn::functional::linear(x, w);
  }
  for (auto& w : parts) w = w.to(x.scalar_type());
  return torch::nn::functional::linear(x, torch::cat(parts, 0));
}

void BlockLinearImpl::Initialize(at::Generator& gen, const ModelConfig& cfg) {
  torch::NoGradGuard no_grad;
  auto w = torch::empty({out, in});
  w.normal_(0.0, 0.02, gen);
  const std::string& scheme = poet ? cfg.poet.init : cfg.init;
  if (scheme == "normalized") {
    w.div_(w.norm(2, {1}, /*keepdim=*/true));  // each output neuron unit-norm
  } else if (scheme == "uniform-spectrum") {
    auto usv = at::linalg_svd(w.to(torch::kFloat64), /*full_matrices=*/false);
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
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), H = n_heads;
  auto qkv = kernels::QkvHeads(StackedLinear(x, {wq, wk, wv}), H, cos, sin);  // 3 x (B, H, T, D)
  auto &q = qkv[0], &k = qkv[1], &v = qkv[2];
  // softmax(q k^T / sqrt(D), masked j > i) v; on CUDA flash attention.
  auto y = kernels::CausalAttention(q, k, v).transpose(1, 2).reshape({B, T, C});
  return wo(y);
}

MlpImpl::MlpImpl(const ModelConfig& cfg, int64_t& layer) {
  gate = register_module("gate", BlockLinear(cfg.d_model, cfg.ffn, cfg, layer++));
  up = register_module("up", BlockLinear(cfg.d_model, cfg.ffn, cfg, layer++));
  down = register_module("down", BlockLinear(cfg.ffn, cfg.d_model, cfg, layer++));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) { return down(kernels::SwiGluPacked(StackedLinear(x, {gate, up}))); }

BlockImpl::BlockImpl(const ModelConfig& cfg, int64_t& layer) : compute(ComputeType(cfg)) {
  attn_norm = register_module("attn_norm", RMSNorm(cfg.d_model));
  attn = register_module("attn", Attention(cfg, layer));
  mlp_norm = register_module("mlp_norm", RMSNorm(cfg.d_model));
  mlp = register_module("mlp", Mlp(cfg, layer));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  // The residual stream stays fp32; each norm writes the branch's compute
  // type, and fp32 + bf16 promotes back to fp32.
  auto h = kernels::ResidualAdd(x, attn(attn_norm->forward(x, compute), cos, sin));
  return kernels::ResidualAdd(h, mlp(mlp_norm->forward(h, compute)));
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
  return Head(Body(Embed(idx), 0, cfg.n_layers));
}

torch::Tensor TransformerImpl::Embed(const torch::Tensor& idx) {
  if (shadow) shadow->Sync();
  return tok_emb(idx);
}

torch::Tensor TransformerImpl::Body(torch::Tensor x, int64_t first, int64_t last) {
  if (shadow) shadow->Sync();
  for (int64_t i = first; i < last; ++i) x = blocks->ptr(i)->as<Block>()->forward(x, rope_cos, rope_sin);
  return x;
}

torch::Tensor TransformerImpl::Head(const torch::Tensor& x) {
  const auto type = ComputeType(cfg);
  torch::Tensor w;
  if (shadow && type == torch::kBFloat16) {
    shadow->Sync();
    w = shadow->Stacked({lm_head->weight});
  }
  if (!w.defined()) w = lm_head->weight.to(type);
  return torch::nn::functional::linear(final_norm->forward(x, type), w);  // (B, T, V)
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

void TransformerImpl::UseBf16Shadow(const torch::Tensor& flat32) {
  shadow = std::make_shared<Bf16Shadow>(flat32);
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* lin = m->as<BlockLinear>()) lin->shadow = shadow.get();
  }
}

void TransformerImpl::MergePoet(uint64_t seed, int64_t count) {
  for (auto& [name, layer] : PoetLayers()) layer->Merge(seed, count);
}

int64_t CountParameters(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

std::vector<std::pair<std::string, torch::Tensor>> StageParameters(Transformer& model, const StageLayers& layers) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (auto& p : model->named_parameters()) {
    const std::string& k = p.key();
    bool mine = false;
    if (k.rfind("tok_emb.", 0) == 0) mine = layers.embed;
    else if (k.rfind("final_norm.", 0) == 0 || k.rfind("lm_head.", 0) == 0) mine = layers.head;
    else if (k.rfind("blocks.", 0) == 0) {
      int block = std::atoi(k.c_str() + 7);
      mine = block >= layers.first && block < layers.last;
    }
    if (mine) out.emplace_back(k, p.value());
  }
  return out;
}

}  // namespace bulwark::trainer
