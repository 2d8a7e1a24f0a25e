// The training run: per process, setup once (data, model), then generations.
//
// A generation is one world's run of the step loop (train_loop.h). When a
// peer is lost, this process does not end: it tells its agent over the rank
// link and waits for the next generation's ASSIGN, then rebuilds only what
// depends on the world (the rendezvous, the shard client) and restores its
// state from the in-memory checkpoint. A process the agent pre-spawned sets
// itself up the same way and waits for its first ASSIGN before any
// generation. Without an agent (a rank run by hand) a lost peer ends the
// process as before. docs/recovery.md.
#include "trainer/step/train.h"

#include <fcntl.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <thread>

#include "common/ring_layout.h"
#include "rank_client/rank_link.h"
#include "rank_client/shard_socket.h"
#include "trainer/comm/dist.h"
#include "trainer/comm/ring.h"
#include "trainer/model/device.h"
#include "trainer/model/device_setup.h"
#include "trainer/step/pipeline.h"
#include "trainer/model/precision.h"
#include "trainer/step/progress.h"
#include "trainer/model/simd.h"
#include "trainer/step/train_loop.h"

namespace bulwark::trainer {
namespace {

// How long a rank that lost its peers waits for the next generation. The
// agent answers within its own bounds (it ends a waiting rank whose restart
// does not come); this only ends a rank whose agent is gone quiet.
constexpr int kAssignWaitMs = 120000;

// Becomes the rank `a` describes: the torchrun variables every reader of the
// environment uses (dist.h, the shard client), and the rank's log for its
// output (a pre-spawned process wrote to a spare log until now).
Status Adopt(const rank_client::RankAssignment& a) {
  ::setenv("RANK", std::to_string(a.rank).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(a.local_rank).c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(a.world_size).c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", std::to_string(a.local_world_size).c_str(), 1);
  ::setenv("MASTER_ADDR", a.master_addr.c_str(), 1);
  ::setenv("MASTER_PORT", std::to_string(a.master_port).c_str(), 1);
  ::setenv("TORCHELASTIC_RESTART_COUNT", std::to_string(a.generation > 0 ? a.generation - 1 : 0).c_str(), 1);
  // This generation's ring plan and slot address: both or neither.
  if (!a.ring_addr.empty() && !a.ring_plan.empty()) {
    ::setenv(rank_client::kRingAddrEnv, a.ring_addr.c_str(), 1);
    ::setenv(rank_client::kRingPlanEnv, a.ring_plan.c_str(), 1);
  } else {
    ::unsetenv(rank_client::kRingAddrEnv);
    ::unsetenv(rank_client::kRingPlanEnv);
  }
  if (a.backup_of >= 0) {
    ::setenv(rank_client::kShardBackupOfEnv, std::to_string(a.backup_of).c_str(), 1);
  } else {
    ::unsetenv(rank_client::kShardBackupOfEnv);
  }
  if (!a.log_path.empty()) {
    std::fflush(stdout);
    std::fflush(stderr);
    const int fd = ::open(a.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return Status::IOError("cannot open the rank log " + a.log_path);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::close(fd);
  }
  return Status::OK();
}

// Every rank's line (only rank 0 prints progress): which process took which
// rank of which generation, and how.
void Announce(const rank_client::RankAssignment& a, const std::string& path) {
  Progress::Emit({{"event", "adopt"}, {"path", path}, {"rank", a.rank}, {"generation", a.generation},
                  {"pid", static_cast<int64_t>(::getpid())}, {"wall_ms", WallMs()}});
}

Status SetUp(const TrainConfig& cfg_in, TrainProcess& p) {
  p.cfg = cfg_in;
  TrainConfig& cfg = p.cfg;
  if (!simd::CpuSupported()) return Status::InvalidArgument("bulwark-train needs a CPU with AVX2 and FMA");
  int gpus = 0;
  auto device = ResolveDevice(cfg, &gpus);
  if (!device.ok()) return device.status();
  p.gpus = gpus;
  p.device_reason = device->reason;
  auto precision = ChoosePrecision(cfg.precision, HostCpuBf16());
  if (!precision.ok()) return precision.status();
  if (device->cuda && cfg.precision == "auto") {
    // The host CPU's flags say nothing about the GPU's: every GPU this
    // trainer targets (Ampere on) multiplies bf16 natively.
    precision->bf16 = true;
    precision->reason = "bf16 (auto: CUDA device)";
  }
  cfg.model.bf16 = precision->bf16;
  p.precision_reason = precision->reason;
  if (device->cuda) {
#ifdef BULWARK_CUDA
    // CUDA BUILD ONLY: never compiled on the CI machine (Debian's libtorch is
    // CPU-only); docs/gpu.md lists what a GPU session must check here.
    p.device = RankGpu(gpus);
    // Fast by default: flash attention and atomics-based backward kernels,
    // so two runs agree only within rounding. BULWARK_CUDA_DETERMINISTIC=1
    // (the gpu tests) asks for bitwise runs and exact resume.
    const char* det = std::getenv("BULWARK_CUDA_DETERMINISTIC");
    if (det != nullptr && *det != '\0' && std::string(det) != "0") {
      MakeCudaDeterministic();
      p.device_reason += "; deterministic (BULWARK_CUDA_DETERMINISTIC)";
    }
#endif
  }
  p.threads = cfg.threads > 0 ? cfg.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(p.threads);  // libtorch defaults to 1 on this platform

  auto data = LoadDataSet(cfg.data_dir);
  if (!data.ok()) return data.status();
  p.data = std::move(*data);
  if (cfg.model.vocab_size == 0) cfg.model.vocab_size = p.data.vocab_size;
  if (cfg.model.vocab_size < p.data.vocab_size) {
    return Status::InvalidArgument("--vocab-size " + std::to_string(cfg.model.vocab_size) +
                                   " is smaller than the tokenizer's " + std::to_string(p.data.vocab_size) +
                                   " in " + cfg.data_dir);
  }
  p.sampler = std::make_unique<Sampler>(p.data.train.size(), cfg.model.context, cfg.seed);
  if (p.sampler->num_samples() < static_cast<uint64_t>(cfg.batch_size)) {
    return Status::InvalidArgument("the training split of " + cfg.data_dir + " holds fewer than --batch-size " +
                                   "samples of --context tokens");
  }
  p.model = Transformer(cfg.model);
  p.model->Initialize(cfg.seed);  // on the CPU, from the CPU generator: the same draws on every device
  if (!p.device.is_cpu()) p.model->to(p.device);
  // From the machine's emulated hardware (BULWARK_SDC_FILE, which the agent
  // names), polled each step, or BULWARK_SDC, or a rank-link inject.
  p.sdc = Sdc::FromEnv();
  p.sdc_file = SdcFile::FromEnv();
  p.pace_file = PaceFile::FromEnv();  // BULWARK_PACE_FILE: a throttled machine
  return Status::OK();
}

// The controller's plans for this generation (BULWARK_RING_PLAN) and the
// slot's fixed addresses (BULWARK_RING_ADDR): with them an elastic ring job
// forms with no store at all, listening where its neighbours' plans say
// (docs/recovery.md). A pipeline's replicas have two rings, the world's and
// their stage's, so each variable then holds two, "world|stage".
struct Plans {
  std::string addr, stage_addr;
  RingPlan world;
  std::optional<RingPlan> stage;
};
Result<std::optional<Plans>> PlansFromEnv(const TrainConfig& cfg) {
  const char* plan = std::getenv(rank_client::kRingPlanEnv);
  const char* addr = std::getenv(rank_client::kRingAddrEnv);
  if (plan == nullptr || addr == nullptr || *plan == '\0' || *addr == '\0') return std::optional<Plans>();
  if (cfg.elastic_replicas == 0 || cfg.elastic_comm != "ring") return std::optional<Plans>();
  const std::string p = plan, a = addr;
  const size_t bar = p.find('|'), abar = a.find('|');
  if ((abar == std::string::npos) != (bar == std::string::npos)) {
    return Status::InvalidArgument(std::string(rank_client::kRingPlanEnv) + " and " + rank_client::kRingAddrEnv +
                                   " must both hold two parts, world|stage, or both one");
  }
  if ((bar == std::string::npos) == UsesPipeline(cfg)) {
    // The controller cut the plans for another layout than this rank's
    // (a job file's parallel.pp that is not the trainer's --pp): the store
    // still serves, so it is a slower regroup, not a failure.
    std::fprintf(stderr, "bulwark-train: the ring plans are for %s job and this rank is %s; rendezvous through the "
                 "store (give the job file parallel: {pp: %d})\n", bar == std::string::npos ? "a data-parallel" : "a pipeline",
                 UsesPipeline(cfg) ? "a pipeline stage" : "data parallel", cfg.pp);
    return std::optional<Plans>();
  }
  Plans out;
  out.addr = a.substr(0, abar);
  auto world = DecodeRingPlan(p.substr(0, bar));
  if (!world.ok()) return world.status().Annotate(rank_client::kRingPlanEnv);
  out.world = std::move(*world);
  if (bar != std::string::npos) {
    out.stage_addr = a.substr(abar + 1);
    auto stage = DecodeRingPlan(p.substr(bar + 1));
    if (!stage.ok()) return stage.status().Annotate(rank_client::kRingPlanEnv);
    out.stage = std::move(*stage);
  }
  return std::optional<Plans>(std::move(out));
}

// Links listening at `addr`, kept while the slot is the same.
Status ListenAt(std::unique_ptr<RingLinks>& links, const std::string& addr, double timeout_s) {
  if (links && links->identity() == addr) return Status::OK();
  auto fresh = RingLinks::ListenAt(addr, timeout_s);
  if (!fresh.ok()) return fresh.status();
  links = std::move(*fresh);
  return Status::OK();
}

// --dist-backend for this generation: its gradient all-reduce over NCCL
// where each of the machine's ranks has a GPU of its own (device.h).
Status ReduceOverNccl(TrainProcess& p, const DistEnv& env, Comm& comm) {
  NcclFacts f;
  f.built_with_nccl = BuiltWithNccl();
  f.cuda = p.device.is_cuda();
  f.world_size = env.world_size;
  const char* local = std::getenv("LOCAL_WORLD_SIZE");
  f.local_world_size = local != nullptr && std::atoi(local) > 0 ? std::atoi(local) : 1;
  f.gpus = p.gpus;
  f.elastic = p.cfg.elastic_replicas > 0;
  auto choice = ChooseNccl(p.cfg.dist_backend, f);
  if (!choice.ok()) return choice.status();
  p.backend_reason = choice->reason;
  p.nccl = choice->nccl;
  // A pipeline's gradients are reduced by each stage's replicas, whose
  // group takes NCCL when it forms (pipeline.cc); its world carries only
  // activations and scalars.
  if (!p.nccl || UsesPipeline(p.cfg)) return Status::OK();
  return comm.UseNccl(p.device.index());
}

// This generation's communicator: from the plans, or through the store.
Result<std::unique_ptr<Comm>> Rendezvous(TrainProcess& p, const DistEnv& env, GenerationStart& g) {
  auto plans = PlansFromEnv(p.cfg);
  if (!plans.ok()) return plans.status();
  const bool ring = p.cfg.elastic_replicas > 0 && p.cfg.elastic_comm == "ring" && env.world_size > 1;
  g.rendezvous = *plans ? "plan" : "store";
  p.stage_plan.reset();
  if (*plans) {
    const Plans& pl = **plans;
    BULWARK_RETURN_IF_ERROR(ListenAt(p.ring, pl.addr, p.cfg.dist_timeout_s));
    if (pl.stage) {
      BULWARK_RETURN_IF_ERROR(ListenAt(p.stage_ring, pl.stage_addr, p.cfg.dist_timeout_s));
      p.stage_plan = pl.stage;
    }
    auto joined = Comm::Join(env, pl.world, p.cfg.dist_timeout_s, *p.ring);
    if (!joined.ok()) return joined;
    BULWARK_RETURN_IF_ERROR(ReduceOverNccl(p, env, **joined));  // elastic: says why the ring
    return joined;
  }
  if (ring && !p.ring) {
    auto links = RingLinks::Listen(env.master_addr);
    if (!links.ok()) return links.status();
    p.ring = std::move(*links);
    p.ring->SetGroupSize(p.cfg.ring_group);
  }
  // An elastic pipeline's stage reduces over a ring of its own, whose
  // links outlive a generation like the world ring's.
  if (ring && p.cfg.pp > 1 && !p.stage_ring) {
    auto stage = RingLinks::Listen(env.master_addr);
    if (!stage.ok()) return stage.status();
    p.stage_ring = std::move(*stage);
    p.stage_ring->SetGroupSize(p.cfg.ring_group);
  }
  auto comm = Comm::Connect(env, p.cfg.dist_timeout_s, p.ring.get());
  if (!comm.ok()) return comm;
  BULWARK_RETURN_IF_ERROR(ReduceOverNccl(p, env, **comm));
  return comm;
}

// A fixed pipeline's generation ended unfinished: a held-back step waits
// to be stopped (the agent restarts the job's ranks as new processes).
Status EndOutOfPlace(TrainProcess& p, const Result<GenerationEnd>& end) {
  if (!end.ok()) return end.status();
  if (p.link && !p.link->WaitClosed(5 * 60 * 1000)) {
    return Status::FailedPrecondition("a step was held back, and no restart came within 5 minutes");
  }
  return Status::Unavailable("a step was held back, and the agent restarts the job");
}

}  // namespace

Status Train(const TrainConfig& cfg_in) {
  int gpus = 0;
  if (auto device = ResolveDevice(cfg_in, &gpus); !device.ok()) return device.status();
  // A fixed pipeline's stages restart in new processes (docs/recovery.md):
  // they neither wait in place for the next generation nor are pre-spawned.
  // An elastic pipeline's generations run in place like data parallel's.
  const bool in_place = !UsesPipeline(cfg_in) || cfg_in.elastic_replicas > 0;
  const bool prespawned = std::getenv(rank_client::kPrespawnEnv) != nullptr;
  if (!in_place && prespawned) return Status::InvalidArgument("pipeline jobs are not pre-spawned");
  GenerationStart g;
  g.began = TrainClock::now();
  g.path = "cold";
  TrainProcess p;
  BULWARK_RETURN_IF_ERROR(SetUp(cfg_in, p));

  auto link = rank_client::RankLink::FromEnv(prespawned ? -1 : std::atoi(std::getenv("RANK") ? std::getenv("RANK") : "0"));
  if (!link.ok()) return link.status();
  p.link = std::move(*link);
  if (p.link && in_place) p.link->OfferInPlace();
  if (p.link && !prespawned) {
    // Under an agent, every rank says which process it is (Announce).
    const char* restarts = std::getenv("TORCHELASTIC_RESTART_COUNT");
    rank_client::RankAssignment a;
    a.rank = std::atoi(std::getenv("RANK") ? std::getenv("RANK") : "0");
    a.generation = restarts ? std::atoll(restarts) + 1 : 1;
    Announce(a, "cold");
  }
  if (prespawned) {
    // Set up and idle until the agent needs a rank: what is left of a
    // start is the rendezvous and the restore.
    if (!p.link) return Status::InvalidArgument(std::string(rank_client::kPrespawnEnv) + " needs an agent's rank link");
    Progress::Emit({{"event", "spare_ready"}, {"pid", static_cast<int64_t>(::getpid())},
                    {"setup_ms", std::chrono::duration<double, std::milli>(TrainClock::now() - g.began).count()}});
    std::optional<rank_client::RankAssignment> a = p.link->AwaitAssignment("READY", 0, -1);
    if (!a) return Status::OK();  // the agent no longer needs it
    BULWARK_RETURN_IF_ERROR(Adopt(*a));
    p.link->Hello(a->rank);
    p.link->OfferInPlace();
    Announce(*a, "prespawned");
    g.path = "prespawned";
    g.began = TrainClock::now();
  }

  for (;;) {
    g.data_ready = TrainClock::now();
    auto env = ReadDistEnv();
    if (!env.ok()) return env.status();
    // A world the job cannot run at is refused before any rendezvous.
    BULWARK_RETURN_IF_ERROR(CheckWorld(env->world_size, p.cfg.pp, p.cfg.elastic_replicas));
    auto comm = Rendezvous(p, *env, g);
    if (!comm.ok()) return comm.status();
    g.rendezvous_done = TrainClock::now();
    Result<GenerationEnd> end = RunGeneration(p, **comm, g);
    if (end.ok() && *end == GenerationEnd::kFinished) return Status::OK();
    if (!in_place) return EndOutOfPlace(p, end);
    const bool halted = end.ok();
    if (!halted && (end.status().code() != Status::Code::kUnavailable || !p.link || p.must_exit)) {
      return end.status();
    }
    // Wait in place for the next generation. The failed world goes first:
    // its sockets close, so peers still inside a collective fail at once.
    const int rank = (*comm)->rank();
    comm->reset();
    // The next generation, when the agent sent it while this one trained (a
    // grow, train_loop.h: SpliceVote): taken at once when every rank voted
    // for it, or when this generation failed anyway; dropped when a step was
    // held back (the controller decides again).
    std::optional<rank_client::RankAssignment> a = p.link->TakeSplice();
    if (halted && *end != GenerationEnd::kSpliced) a.reset();
    const bool spliced = a.has_value();
    if (!halted) {
      std::fprintf(stderr, "\nbulwark-train: rank %d: %s; %s\n", rank, end.status().message().c_str(),
                   spliced ? "going on in the generation the agent sent" : "waiting for the next generation");
      std::fflush(stderr);
    }
    const auto lost = TrainClock::now();
    if (!a) a = p.link->AwaitAssignment(halted ? "WAIT" : "LOST", 0, kAssignWaitMs);
    if (!a) {
      if (halted && *end == GenerationEnd::kYielded) return Status::FailedPrecondition("asked to yield and no generation came");
      return halted ? Status::FailedPrecondition("a step was held back and no decision came")
                    : end.status();
    }
    BULWARK_RETURN_IF_ERROR(Adopt(*a));
    p.link->Hello(a->rank);
    p.link->OfferInPlace();
    Announce(*a, spliced ? "splice" : "rejoin");
    g.path = "rejoin";
    g.spliced = spliced;
    g.began = TrainClock::now();
    g.assign_wait_ms = std::chrono::duration<double, std::milli>(g.began - lost).count();
  }
}

}  // namespace bulwark::trainer
