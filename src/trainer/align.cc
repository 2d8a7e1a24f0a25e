#include "trainer/align.h"

#include <torch/torch.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "trainer/model.h"
#include "trainer/params.h"
#include "trainer/sdc.h"

namespace bulwark::trainer {
namespace {

// FNV-1a, 64 bits, over raw bytes: bit-exact, no rounding of its own.
uint64_t Fnv(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace

Status RunAlign(const TrainConfig& cfg_in, int threads) {
  const auto t0 = std::chrono::steady_clock::now();
  TrainConfig cfg = cfg_in;
  cfg.model.bf16 = false;  // fp32: the same on every CPU this runs on
  // The data set's vocabulary decides the embedding's shape in a real run;
  // the reference model needs none of the data, so an unset size is fixed.
  if (cfg.model.vocab_size == 0) cfg.model.vocab_size = 256;
  at::set_num_threads(threads);

  Transformer model(cfg.model);
  model->Initialize(cfg.seed);
  ParamStore store(*model, 1);
  store.ZeroGrad();

  // A fixed batch: (B, T) tokens from a fixed formula, targets shifted by one.
  const int B = 2, T = static_cast<int>(cfg.model.context);
  auto idx = torch::empty({B, T}, torch::kInt64), targets = torch::empty({B, T}, torch::kInt64);
  auto* pi = idx.data_ptr<int64_t>();
  auto* pt = targets.data_ptr<int64_t>();
  const int64_t V = cfg.model.vocab_size;
  for (int64_t i = 0; i < static_cast<int64_t>(B) * T; ++i) {
    pi[i] = (i * 7919 + 13) % V;
    pt[i] = (i * 7919 + 13 + 7919) % V;
  }
  auto loss = model->Loss(idx, targets);
  loss.backward();
  torch::Tensor grads = store.GradsView().contiguous();
  // The emulated bad machine's matmul results (sdc.h); silent.
  if (auto sdc = Sdc::FromEnv()) sdc->Corrupt(grads);

  const float l = loss.item<float>();
  uint64_t h = Fnv(&l, sizeof l);
  h = Fnv(grads.data_ptr<float>(), static_cast<size_t>(grads.numel()) * sizeof(float), h);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("{\"align_hash\":\"%016" PRIx64 "\",\"loss\":%.9g,\"ms\":%.1f,\"threads\":%d,\"params\":%" PRId64 "}\n",
              h, static_cast<double>(l), ms, threads, static_cast<int64_t>(store.num_params()));
  std::fflush(stdout);
  return Status::OK();
}

}  // namespace bulwark::trainer
