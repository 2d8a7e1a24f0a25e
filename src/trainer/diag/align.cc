#include "trainer/diag/align.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "trainer/comm/dist.h"
#include "trainer/model/device_setup.h"
#include "trainer/model/kernels.h"
#include "trainer/model/model.h"
#include "trainer/model/params.h"
#include "trainer/diag/sdc.h"

namespace bulwark::trainer {
namespace {

// FNV-1a, 64 bits, over raw bytes: bit-exact, no rounding of its own.
uint64_t Fnv(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// The fixed batch of (step, replica): (B, T) tokens from a fixed formula,
// targets shifted by one.
void FixedBatch(int step, int replica, int64_t V, torch::Tensor& idx, torch::Tensor& targets) {
  auto* pi = idx.data_ptr<int64_t>();
  auto* pt = targets.data_ptr<int64_t>();
  const int64_t salt = 104729LL * step + 15485863LL * replica;
  for (int64_t i = 0; i < idx.numel(); ++i) {
    pi[i] = (i * 7919 + 13 + salt) % V;
    pt[i] = (i * 7919 + 13 + 7919 + salt) % V;
  }
}

void PrintResult(uint64_t h, float loss, bool finite, int steps, int world, double ms, int threads, int64_t params,
                 const std::string& layout) {
  std::printf("{\"align_hash\":\"%016" PRIx64 "\",\"loss\":%.9g,\"finite\":%s,\"steps\":%d,\"world\":%d,"
              "\"ms\":%.1f,\"threads\":%d,\"params\":%" PRId64 "%s}\n",
              h, static_cast<double>(loss), finite ? "true" : "false", steps, world, ms, threads, params,
              layout.c_str());
  std::fflush(stdout);
}

// A vertical replay group of a pipeline job: the job's own PP layout with DP
// shrunk to the group's replicas (rank = stage x replicas + replica, as in
// training). Each stage runs its layers on the fixed batch of its replica,
// activations forward and their gradients back by send/recv, gradients
// averaged within the stage's replicas, then plain SGD. Rank 0 reports a
// hash over every stage's loss, gradients and parameters, and whether any
// stage went non-finite.
Status RunAlignPipeline(const TrainConfig& cfg, Comm& world, torch::Device dev, int threads, int steps,
                        std::chrono::steady_clock::time_point t0) {
  auto coords = RankCoords(world.rank(), world.world_size(), cfg.pp);
  if (!coords.ok()) return coords.status();
  const PipelineCoords c = *coords;
  std::vector<int> dp_ranks;
  for (int d = 0; d < c.dp_size; ++d) dp_ranks.push_back(RankOf(d, c.pp, c.dp_size));
  auto dp_or = world.Subgroup("align-dp-" + std::to_string(c.pp), dp_ranks, cfg.dist_timeout_s);
  if (!dp_or.ok()) return dp_or.status();
  Comm& dp = **dp_or;
  const StageLayers layers = SplitLayers(cfg.model.n_layers, c.pp_size)[c.pp];
  Transformer model(cfg.model);
  model->Initialize(cfg.seed);  // on the CPU: the same draws for every device
  if (!dev.is_cpu()) model->to(dev);
  ParamStore store(StageParameters(model, layers), 1);
  std::optional<Sdc> sdc = Sdc::FromEnv();
  const int B = 2, T = static_cast<int>(cfg.model.context);
  const int64_t C = cfg.model.d_model;
  auto idx = torch::empty({B, T}, torch::kInt64), targets = torch::empty({B, T}, torch::kInt64);
  const auto on_dev = torch::TensorOptions().device(dev);
  const int prev = RankOf(c.dp, c.pp - 1, c.dp_size), next = RankOf(c.dp, c.pp + 1, c.dp_size);
  float l = 0;
  for (int step = 0; step < steps; ++step) {
    FixedBatch(step, c.dp, cfg.model.vocab_size, idx, targets);
    store.ZeroGrad();
    torch::Tensor input, h;
    if (layers.embed) {
      h = model->Embed(idx.to(dev));
    } else {
      input = torch::empty({B, T, C}, on_dev);
      BULWARK_RETURN_IF_ERROR(world.Recv(input, prev, 2 * step));
      input.requires_grad_(true);
      h = input;
    }
    h = model->Body(h, layers.first, layers.last);
    if (layers.head) {
      auto logits = model->Head(h);
      auto loss = kernels::CrossEntropy(logits.view({-1, logits.size(-1)}), targets.to(dev).reshape({-1}));
      loss.backward();
      l = loss.item<float>();
    } else {
      BULWARK_RETURN_IF_ERROR(world.Send(h.detach(), next, 2 * step));
      auto grad = torch::empty({B, T, C}, on_dev);
      BULWARK_RETURN_IF_ERROR(world.Recv(grad, next, 2 * step + 1));
      h.backward(grad);
    }
    if (!layers.embed) BULWARK_RETURN_IF_ERROR(world.Send(input.grad(), prev, 2 * step + 1));
    BULWARK_RETURN_IF_ERROR(world.WaitSends());
    torch::Tensor grads = store.GradsView();
    if (sdc) sdc->Corrupt(grads);  // the emulated bad machine (sdc.h); silent
    if (c.dp_size > 1) {
      std::vector<torch::Tensor> all = {store.grads()};
      BULWARK_RETURN_IF_ERROR(dp.AllReduceSum(all));
      store.grads().div_(c.dp_size);
    }
    if (steps > 1) {
      torch::NoGradGuard no_grad;
      store.ParamsView().sub_(store.GradsView(), 0.01);
    }
  }
  // Every stage's digest (from its replica 0) and non-finite count, and the
  // last stage's loss, summed over the world: halves of a 64-bit digest
  // travel as doubles, which hold 32-bit integers exactly.
  torch::Tensor grads = store.GradsView().contiguous().cpu(), params = store.ParamsView().contiguous().cpu();
  const bool finite = std::isfinite(l) && torch::isfinite(params).all().item<bool>() &&
                      torch::isfinite(grads).all().item<bool>();
  uint64_t mine = Fnv(grads.data_ptr<float>(), static_cast<size_t>(grads.numel()) * sizeof(float));
  mine = Fnv(params.data_ptr<float>(), static_cast<size_t>(params.numel()) * sizeof(float), mine);
  auto sums = torch::zeros({2 * c.pp_size + 2}, torch::kFloat64);
  if (c.dp == 0) {
    sums[2 * c.pp] = static_cast<double>(mine >> 32);
    sums[2 * c.pp + 1] = static_cast<double>(mine & 0xffffffffu);
    if (layers.head) sums[2 * c.pp_size] = static_cast<double>(l);
  }
  sums[2 * c.pp_size + 1] = finite ? 0.0 : 1.0;
  std::vector<torch::Tensor> v{sums};
  BULWARK_RETURN_IF_ERROR(world.AllReduceSum(v));
  const float loss = static_cast<float>(sums[2 * c.pp_size].item<double>());
  uint64_t h = Fnv(&loss, sizeof loss);
  for (int s = 0; s < c.pp_size; ++s) {
    const uint64_t x = (static_cast<uint64_t>(sums[2 * s].item<double>()) << 32) |
                       static_cast<uint64_t>(sums[2 * s + 1].item<double>());
    h = Fnv(&x, sizeof x, h);
  }
  const bool all_finite = sums[2 * c.pp_size + 1].item<double>() == 0 && std::isfinite(loss);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (world.rank() == 0) {
    PrintResult(h, loss, all_finite, steps, world.world_size(), ms, threads, store.num_params(),
                ",\"pp\":" + std::to_string(c.pp_size) + ",\"layers\":" + std::to_string(cfg.model.n_layers));
  }
  return Status::OK();
}

// The fixed steps on one device: alone, or one rank of a replay group whose
// gradients are averaged over `comm`. The hash covers the last loss, the
// gradients and the parameters, read on the host.
struct AlignOutcome {
  uint64_t hash = 0;
  float loss = 0;
  bool finite = false;
  int64_t params = 0;
};
Result<AlignOutcome> AlignSteps(const TrainConfig& cfg, torch::Device dev, Comm& comm, int steps) {
  const int W = comm.world_size(), rank = comm.rank();
  Transformer model(cfg.model);
  model->Initialize(cfg.seed);  // on the CPU: the same draws for every device
  if (!dev.is_cpu()) model->to(dev);
  ParamStore store(*model, 1);
  std::optional<Sdc> sdc = Sdc::FromEnv();

  // A fixed batch per (step, rank): (B, T) tokens from a fixed formula,
  // targets shifted by one.
  const int B = 2, T = static_cast<int>(cfg.model.context);
  auto idx = torch::empty({B, T}, torch::kInt64), targets = torch::empty({B, T}, torch::kInt64);
  float l = 0;
  for (int step = 0; step < steps; ++step) {
    FixedBatch(step, rank, cfg.model.vocab_size, idx, targets);
    store.ZeroGrad();
    auto loss = model->Loss(idx.to(dev), targets.to(dev));
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
  torch::Tensor grads = store.GradsView().contiguous().cpu();
  torch::Tensor params = store.ParamsView().contiguous().cpu();
  AlignOutcome o;
  o.loss = l;
  o.finite = std::isfinite(l) && torch::isfinite(params).all().item<bool>() && torch::isfinite(grads).all().item<bool>();
  o.hash = Fnv(&l, sizeof l);
  o.hash = Fnv(grads.data_ptr<float>(), static_cast<size_t>(grads.numel()) * sizeof(float), o.hash);
  o.hash = Fnv(params.data_ptr<float>(), static_cast<size_t>(params.numel()) * sizeof(float), o.hash);
  o.params = store.num_params();
  return o;
}

std::string Hex(uint64_t h) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, h);
  return buf;
}

}  // namespace

DeviceHashes JudgeDeviceHashes(const std::vector<uint64_t>& per_gpu) {
  DeviceHashes d;
  if (per_gpu.empty()) return d;
  std::map<uint64_t, int> count;
  for (uint64_t h : per_gpu) ++count[h];
  if (count.size() == 1) {
    d.hash = per_gpu[0];
    return d;
  }
  d.hash = Fnv(per_gpu.data(), per_gpu.size() * sizeof(uint64_t));
  const size_t n = per_gpu.size();
  std::optional<uint64_t> majority;
  for (const auto& [h, c] : count) {
    if (2 * static_cast<size_t>(c) > n) majority = h;
  }
  if (!majority) {
    d.disagree = "no strict majority among the machine's " + std::to_string(n) + " GPUs:";
    for (size_t i = 0; i < n; ++i) d.disagree += (i ? ", GPU " : " GPU ") + std::to_string(i) + " " + Hex(per_gpu[i]);
    return d;
  }
  for (size_t i = 0; i < n; ++i) {
    if (per_gpu[i] == *majority) continue;
    d.disagree += (d.disagree.empty() ? "GPU " : ", GPU ") + std::to_string(i) + " computed " + Hex(per_gpu[i]);
  }
  d.disagree += "; the other " + std::to_string(count[*majority]) + " GPUs " + Hex(*majority);
  return d;
}

Status RunAlign(const TrainConfig& cfg_in, int threads, int steps, int stage) {
  const auto t0 = std::chrono::steady_clock::now();
  TrainConfig cfg = cfg_in;
  cfg.model.bf16 = false;  // fp32: the same on every CPU this runs on
  // The data set's vocabulary decides the embedding's shape in a real run;
  // the reference model needs none of the data, so an unset size is fixed.
  if (cfg.model.vocab_size == 0) cfg.model.vocab_size = 256;
  // A horizontal replay group of a pipeline job: one stage's share of the
  // layers, as a whole (shrunk) model of its own, data parallel.
  if (stage >= 0) {
    if (cfg.pp < 2 || stage >= cfg.pp || cfg.pp > cfg.model.n_layers) {
      return Status::InvalidArgument("--align-stage " + std::to_string(stage) + " needs a job with --pp above it");
    }
    const StageLayers sl = SplitLayers(cfg.model.n_layers, cfg.pp)[stage];
    cfg.model.n_layers = sl.last - sl.first;
    cfg.pp = 1;
  }
  int gpus = 0;
  auto device = ResolveDevice(cfg, &gpus);
  if (!device.ok()) return device.status();
  // Healthy GPUs of one model agree bit for bit only with deterministic
  // kernels; the job's own speed is not at stake here.
  if (device->cuda) MakeCudaDeterministic();
  at::set_num_threads(threads);
  // A replay group (RANK, WORLD_SIZE, MASTER_*) averages its gradients like
  // data-parallel training; alone, the collectives are no-ops.
  auto env = ReadDistEnv();
  if (!env.ok()) return env.status();
  auto comm_or = Comm::Connect(*env, cfg.dist_timeout_s);
  if (!comm_or.ok()) return comm_or.status();
  Comm& comm = **comm_or;
  const int W = comm.world_size();
  // Where it runs: the CPU; alone on a GPU machine, every GPU in turn (a
  // machine is as good as its worst GPU, and its GPUs must agree with each
  // other); a replay group's rank on its LOCAL_RANK's GPU, as in training.
  std::vector<torch::Device> devices;
  if (!device->cuda) {
    devices.emplace_back(torch::kCPU);
  } else if (W == 1) {
    for (int g = 0; g < gpus; ++g) devices.emplace_back(torch::kCUDA, static_cast<c10::DeviceIndex>(g));
  } else {
    devices.push_back(RankGpu(gpus));
  }
  if (cfg.pp > 1 && W > 1) return RunAlignPipeline(cfg, comm, devices[0], threads, steps, t0);

  std::vector<uint64_t> hashes;
  AlignOutcome first;
  bool finite = true;
  for (const torch::Device& dev : devices) {
    auto o = AlignSteps(cfg, dev, comm, steps);
    if (!o.ok()) return o.status();
    if (hashes.empty()) first = *o;
    hashes.push_back(o->hash);
    finite = finite && o->finite;
  }
  const DeviceHashes judged = JudgeDeviceHashes(hashes);
  std::string where = device->cuda ? ",\"device\":\"cuda\",\"gpus\":" + std::to_string(devices.size()) : ",\"device\":\"cpu\"";
  if (!judged.disagree.empty()) where += ",\"gpus_disagree\":\"" + judged.disagree + "\"";
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (comm.rank() == 0) PrintResult(judged.hash, first.loss, finite, steps, W, ms, threads, first.params, where);
  return Status::OK();
}

}  // namespace bulwark::trainer
