#include "trainer/model/poet.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "trainer/data/sampler.h"

namespace bulwark::trainer {

// ----------------------------------------------------------------------------
// Cayley-Neumann parameterization

torch::Tensor SkewFromUpper(const torch::Tensor& upper, int64_t b) {
  // On the device of `upper`: a GPU's index_copy_ takes no host index.
  auto idx = torch::triu_indices(b, b, 1, torch::TensorOptions().dtype(torch::kInt64).device(upper.device()));  // (2, L)
  auto flat = (idx[0] * b + idx[1]).to(torch::kInt64);           // (L)
  auto u = torch::zeros({upper.size(0), b * b}, upper.options()).index_copy(1, flat, upper).view({-1, b, b});
  return u - u.transpose(1, 2);
}

torch::Tensor CayleyNeumann(const torch::Tensor& q, int terms) {
  // (I + Q)(I + Q + ... + Q^k) = sum_i c_i Q^i with c_0 = c_(k+1) = 1 and
  // c_i = 2 otherwise. Split into even and odd powers, R = E(A) + Q O(A)
  // with A = Q^2: 1 + floor((k+1)/2) matmuls instead of Horner's k+1, which
  // matters for POET-FS, whose single rotation is b x b with b = m/2.
  const int top = terms + 1;
  auto coeff = [&](int i) { return (i == 0 || i == top) ? 1.0 : 2.0; };
  auto eye = torch::eye(q.size(-1), q.options()).expand_as(q);
  auto a = torch::matmul(q, q);
  torch::Tensor even = eye * coeff(0), odd = eye * coeff(1);
  torch::Tensor power = eye;  // A^j
  for (int j = 1; 2 * j <= top; ++j) {
    power = j == 1 ? a : torch::matmul(power, a);
    even = even + power * coeff(2 * j);
    if (2 * j + 1 <= top) odd = odd + power * coeff(2 * j + 1);
  }
  return even + torch::matmul(q, odd);
}

// ----------------------------------------------------------------------------
// The layer

PoetLinearImpl::PoetLinearImpl(int64_t in, int64_t out, const PoetOptions& opts, int64_t layer)
    : opts_(opts), in_(in), out_(out), layer_(layer) {
  auto side = [&](int64_t width) {
    if (opts_.variant == "bs") return Side{width, opts_.block_size, width / opts_.block_size};
    return Side{width, std::max<int64_t>(2, std::llround(opts_.fs_fraction * width)), 1};
  };
  side_out_ = side(out);
  side_in_ = side(in);
  auto tri = [](const Side& s) { return s.b * (s.b - 1) / 2; };
  q_out = register_parameter("q_out", torch::zeros({side_out_.blocks, tri(side_out_)}));
  q_in = register_parameter("q_in", torch::zeros({side_in_.blocks, tri(side_in_)}));
  w0 = register_buffer("w0", torch::zeros({out, in}));
  const int64_t n_out = opts_.variant == "bs" ? out : side_out_.b, n_in = opts_.variant == "bs" ? in : side_in_.b;
  idx_out = register_buffer("idx_out", torch::arange(n_out, torch::kInt64));
  idx_in = register_buffer("idx_in", torch::arange(n_in, torch::kInt64));
  inv_out = register_buffer("inv_out", torch::arange(opts_.variant == "bs" ? out : 0, torch::kInt64));
  inv_in = register_buffer("inv_in", torch::arange(opts_.variant == "bs" ? in : 0, torch::kInt64));
  sigma0 = register_buffer("sigma0", torch::zeros({std::min(in, out)}));
  r_cum = register_buffer("r_cum", opts_.diag_every > 0 ? torch::eye(out) : torch::zeros({0}));
}

torch::Tensor PoetLinearImpl::Rotations(const torch::Tensor& q, const Side& s) {
  return CayleyNeumann(SkewFromUpper(q, s.b), opts_.neumann_terms);
}

// R m for m (out, n). BS: gather rows into permuted order, rotate each block
// of b rows, scatter back. FS: rotate the chosen rows only.
torch::Tensor PoetLinearImpl::ApplyLeft(const torch::Tensor& m, const torch::Tensor& g) {
  const int64_t n = m.size(1);
  if (opts_.variant == "fs") return m.index_copy(0, idx_out, torch::matmul(g[0], m.index_select(0, idx_out)));
  auto blocks = torch::matmul(g, m.index_select(0, idx_out).view({side_out_.blocks, side_out_.b, n}));
  return blocks.reshape({out_, n}).index_select(0, inv_out);
}

// m P for m (r, in): the same on columns.
torch::Tensor PoetLinearImpl::ApplyRight(const torch::Tensor& m, const torch::Tensor& g) {
  const int64_t r = m.size(0);
  if (opts_.variant == "fs") return m.index_copy(1, idx_in, torch::matmul(m.index_select(1, idx_in), g[0]));
  auto cols = m.index_select(1, idx_in).view({r, side_in_.blocks, side_in_.b}).transpose(0, 1);  // (nb, r, b)
  return torch::matmul(cols, g).transpose(0, 1).reshape({r, in_}).index_select(1, inv_in);
}

torch::Tensor PoetLinearImpl::EffectiveWeight() {
  return ApplyLeft(ApplyRight(w0, Rotations(q_in, side_in_)), Rotations(q_out, side_out_));
}

// y = x P^T W0^T R^T without forming the weight: each activation row is
// permuted, rotated block by block, multiplied by W0, rotated and permuted.
torch::Tensor PoetLinearImpl::ForwardActivations(const torch::Tensor& x) {
  auto gi = Rotations(q_in, side_in_), go = Rotations(q_out, side_out_);
  auto rows = x.reshape({-1, in_});
  const int64_t N = rows.size(0);
  auto xr = rows.index_select(1, idx_in).view({N, side_in_.blocks, side_in_.b}).transpose(0, 1);  // (nb, N, b)
  auto xp = torch::matmul(xr, gi.transpose(1, 2)).transpose(0, 1).reshape({N, in_}).index_select(1, inv_in);
  auto y = torch::nn::functional::linear(xp, w0);
  auto yr = y.index_select(1, idx_out).view({N, side_out_.blocks, side_out_.b}).transpose(0, 1);
  auto yp = torch::matmul(yr, go.transpose(1, 2)).transpose(0, 1).reshape({N, out_}).index_select(1, inv_out);
  auto shape = x.sizes().vec();
  shape.back() = out_;
  return yp.view(shape);
}

torch::Tensor PoetLinearImpl::forward(const torch::Tensor& x) {
  // Rotations (the Cayley-Neumann series) always in fp32; under bf16 only
  // the finished weight is cast, or the rotated activations run in fp32.
  if (opts_.apply == "activations") {
    if (x.scalar_type() == torch::kFloat32) return ForwardActivations(x);
    return ForwardActivations(x.to(torch::kFloat32)).to(x.scalar_type());
  }
  return torch::nn::functional::linear(x, EffectiveWeight().to(x.scalar_type()));
}

void PoetLinearImpl::SetInitialWeight(const torch::Tensor& w) {
  torch::NoGradGuard g;
  w0.copy_(w);
  sigma0.copy_(at::linalg_svdvals(w0.to(torch::kFloat64)).to(torch::kFloat32));
  if (r_cum.numel() > 0) r_cum.copy_(torch::eye(out_, r_cum.options()));
}

void PoetLinearImpl::DrawIndices(uint64_t seed, int64_t merge_count) {
  uint64_t state = seed ^ (0xA24BAED4963EE407ull * static_cast<uint64_t>(layer_ + 1)) ^
                   (0x9FB21C651E98DF25ull * static_cast<uint64_t>(merge_count + 1));
  auto draw = [&](int64_t width, torch::Tensor& idx, torch::Tensor& inv) {
    std::vector<int64_t> p(width);
    for (int64_t i = 0; i < width; ++i) p[i] = i;
    for (int64_t i = width - 1; i > 0; --i) std::swap(p[i], p[SplitMix64(state) % (i + 1)]);
    if (opts_.variant == "fs") {
      p.resize(idx.numel());  // the first b of a random permutation: a uniform b-subset
      std::sort(p.begin(), p.end());
    }
    // Drawn on the host, then copied: the buffers may live on a GPU.
    idx.copy_(torch::tensor(p, torch::kInt64));
    if (inv.numel() > 0) {
      std::vector<int64_t> v(width);
      for (int64_t i = 0; i < width; ++i) v[p[i]] = i;
      inv.copy_(torch::tensor(v, torch::kInt64));
    }
  };
  draw(out_, idx_out, inv_out);
  draw(in_, idx_in, inv_in);
}

void PoetLinearImpl::Merge(uint64_t seed, int64_t merge_count) {
  torch::NoGradGuard g;
  auto go = Rotations(q_out, side_out_);
  auto merged = ApplyLeft(ApplyRight(w0, Rotations(q_in, side_in_)), go);
  if (r_cum.numel() > 0) r_cum.copy_(ApplyLeft(r_cum, go));
  w0.copy_(merged);
  q_out.zero_();
  q_in.zero_();
  DrawIndices(seed, merge_count);
}

PoetDiagnostics PoetLinearImpl::Diagnose() {
  torch::NoGradGuard g;
  PoetDiagnostics d;
  auto orth = [](const torch::Tensor& rot, int64_t width) {
    auto eye = torch::eye(rot.size(-1), rot.options()).expand_as(rot);
    auto err = torch::matmul(rot, rot.transpose(1, 2)) - eye;  // blocks outside the rotations are exact
    return std::sqrt(err.pow(2).sum().item<double>() / static_cast<double>(width));
  };
  auto go = Rotations(q_out, side_out_), gi = Rotations(q_in, side_in_);
  d.orth_error_r = orth(go, out_);
  d.orth_error_p = orth(gi, in_);
  auto s = at::linalg_svdvals(EffectiveWeight().to(torch::kFloat64)).to(torch::kFloat32);
  d.spectrum_drift = ((s - sigma0).abs().max() / sigma0.max()).item<double>();
  if (r_cum.numel() > 0) d.probe = ApplyLeft(r_cum, go).trace().item<double>() / static_cast<double>(out_);
  return d;
}

}  // namespace bulwark::trainer
