#include "trainer/align.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "trainer/dist.h"
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

Status RunAlign(const TrainConfig& cfg_in, int threads, int steps) {
  const auto t0 = std::chrono::steady_clock::now();
  TrainConfig cfg = cfg_in;
  cfg.model.bf16 = false;  // fp32: the same on every CPU this runs on
  // The data set's vocabulary decides the embedding's shape in a real run;
  // the reference model needs none of the data, so an unset size is fixed.
  if (cfg.model.vocab_size == 0) cfg.model.vocab_size = 256;
  at::set_num_threads(threads);
  // A replay group (RANK, WORLD_SIZE, MASTER_*) averages its gradients like
  // data-parallel training; alone, the collectives are no-ops.
  auto env = ReadDistEnv();
  if (!env.ok()) return env.status();
  auto comm_or = Comm::Connect(*env, cfg.dist_timeout_s);
  if (!comm_or.ok()) return comm_or.status();
  Comm& comm = **comm_or;
  const int W = comm.world_size(), rank = comm.rank();

  Transformer model(cfg.model);
  model->Initialize(cfg.seed);
  ParamStore store(*model, 1);
  std::optional<Sdc> sdc = Sdc::FromEnv();

  // A fixed batch per (step, rank): (B, T) tokens from a fixed formula,
  // targets shifted by one.
  const int B = 2, T = static_cast<int>(cfg.model.context);
  auto idx = torch::empty({B, T}, torch::kInt64), targets = torch::empty({B, T}, torch::kInt64);
  const int64_t V = cfg.model.vocab_size;
  float l = 0;
  for (int step = 0; step < steps; ++step) {
    auto* pi = idx.data_ptr<int64_t>();
    auto* pt = targets.data_ptr<int64_t>();
    const int64_t salt = 104729LL * step + 15485863LL * rank;
    for (int64_t i = 0; i < static_cast<int64_t>(B) * T; ++i) {
      pi[i] = (i * 7919 + 13 + salt) % V;
      pt[i] = (i * 7919 + 13 + 7919 + salt) % V;
    }
    store.ZeroGrad();
    auto loss = model->Loss(idx, targets);
    loss.backward();
    l = loss.item<float>();
    torch::Tensor grads = store.GradsView();
    // The emulated bad machine's matmul results (sdc.h); silent.
    if (sdc) sdc->Corrupt(grads);
    if (W > 1) {
      std::vector<torch::Tensor> all = {store.grads()};
      BULWARK_RETURN_IF_ERROR(comm.AllReduceSum(all));
      store.grads().div_(W);
    }
    if (steps > 1) {
      torch::NoGradGuard no_grad;
      store.ParamsView().sub_(store.GradsView(), 0.01);  // plain SGD: nothing but the step itself
    }
  }
  torch::Tensor grads = store.GradsView().contiguous();
  torch::Tensor params = store.ParamsView().contiguous();
  const bool finite = std::isfinite(l) && torch::isfinite(params).all().item<bool>() &&
                      torch::isfinite(grads).all().item<bool>();
  uint64_t h = Fnv(&l, sizeof l);
  h = Fnv(grads.data_ptr<float>(), static_cast<size_t>(grads.numel()) * sizeof(float), h);
  h = Fnv(params.data_ptr<float>(), static_cast<size_t>(params.numel()) * sizeof(float), h);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (rank == 0) {
    std::printf("{\"align_hash\":\"%016" PRIx64 "\",\"loss\":%.9g,\"finite\":%s,\"steps\":%d,\"world\":%d,"
                "\"ms\":%.1f,\"threads\":%d,\"params\":%" PRId64 "}\n",
                h, static_cast<double>(l), finite ? "true" : "false", steps, W, ms, threads,
                static_cast<int64_t>(store.num_params()));
    std::fflush(stdout);
  }
  return Status::OK();
}

}  // namespace bulwark::trainer
