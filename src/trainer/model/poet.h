// POET: reparameterized training by orthogonal equivalence transformation
// (arXiv 2506.08001; reference notes in shared/reference/poet.md).
//
// A PoetLinear holds a frozen weight W0 (out x in) and learns two orthogonal
// matrices, R on the output side and P on the input side, so the layer
// computes y = x (R W0 P)^T and the singular values of its weight stay those
// of W0. R and P are built from skew-symmetric Q (only the strict upper
// triangle is a parameter) by the Cayley-Neumann parameterization
//   R = (I + Q)(I + Q + Q^2 + ... + Q^k).
// Two variants:
//   BS (block-stochastic): R = Psi^T Diag(G_1..G_{m/b}) Psi with a random
//      permutation Psi and b x b CNP blocks: every coordinate rotates.
//   FS (fully stochastic): R = I + D(S)(G - I)D(S)^T for a random index set S
//      of size fraction*m: one b x b CNP rotation of the chosen coordinates.
// Every --poet-merge-every steps the rotations are folded into W0, Q is reset
// to zero and new permutations / index sets are drawn from (seed, merge count,
// layer), so every data-parallel rank draws the same ones without talking.
#pragma once

#include <torch/torch.h>

#include <string>

#include "trainer/model/poet_options.h"

namespace bulwark::trainer {

struct PoetDiagnostics {
  double orth_error_r = 0, orth_error_p = 0;  // ||R R^T - I||_F / sqrt(m)
  double spectrum_drift = 0;                   // max_i |s_i(W) - s_i(W0 at init)| / s_1(W0 at init)
  double probe = 0;                            // Tr(R_cum) / m, R_cum = product of all R so far
};

class PoetLinearImpl : public torch::nn::Module {
 public:
  // `layer` numbers the layer within the model: it seeds its permutations.
  PoetLinearImpl(int64_t in, int64_t out, const PoetOptions& opts, int64_t layer);

  torch::Tensor forward(const torch::Tensor& x);
  // R W0 P, differentiable in Q.
  torch::Tensor EffectiveWeight();
  // Sets W0 (e.g. from the model's init) and records its spectrum.
  void SetInitialWeight(const torch::Tensor& w0);
  // Folds R and P into W0, zeroes Q, draws the permutations / index sets of
  // merge number `merge_count` (1-based) from `seed`.
  void Merge(uint64_t seed, int64_t merge_count);
  // Draws the permutations / index sets for merge number `merge_count`.
  void DrawIndices(uint64_t seed, int64_t merge_count);
  PoetDiagnostics Diagnose();
  int64_t in() const { return in_; }
  int64_t out() const { return out_; }

  torch::Tensor q_out, q_in;  // parameters: strict upper triangles, (blocks, b(b-1)/2)
  torch::Tensor w0;           // buffer (out, in)
  torch::Tensor idx_out, idx_in;          // buffers: BS permutation / FS index set (int64)
  torch::Tensor inv_out, inv_in;          // buffers: BS inverse permutations
  torch::Tensor sigma0;       // buffer: singular values of W0 at init
  torch::Tensor r_cum;        // buffer (out, out) when diagnostics are on, else empty

 private:
  struct Side {
    int64_t width, b, blocks;
  };
  torch::Tensor Rotations(const torch::Tensor& q, const Side& s);  // (blocks, b, b)
  torch::Tensor ApplyLeft(const torch::Tensor& m, const torch::Tensor& g);   // R m
  torch::Tensor ApplyRight(const torch::Tensor& m, const torch::Tensor& g);  // m P
  torch::Tensor ForwardActivations(const torch::Tensor& x);

  PoetOptions opts_;
  int64_t in_, out_, layer_;
  Side side_out_, side_in_;
  torch::Tensor triu_flat_out_, triu_flat_in_;  // flat indices of the upper triangle in b*b
};
TORCH_MODULE(PoetLinear);

// (I + Q)(I + Q + ... + Q^k) for a batch of skew-symmetric Q (..., b, b).
torch::Tensor CayleyNeumann(const torch::Tensor& q, int terms);
// Skew-symmetric (blocks, b, b) from strict upper triangles (blocks, b(b-1)/2).
torch::Tensor SkewFromUpper(const torch::Tensor& upper, int64_t b);


}  // namespace bulwark::trainer
