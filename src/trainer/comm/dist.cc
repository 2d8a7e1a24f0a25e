#include "trainer/comm/dist.h"

#include "trainer/comm/ring.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#ifdef BULWARK_NCCL
#include <c10/cuda/CUDAStream.h>

#include "trainer/comm/nccl_group.h"
#endif

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <thread>

namespace bulwark::trainer {
namespace {

Result<int> EnvInt(const char* name, int lo, int hi) {
  const char* v = std::getenv(name);
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (!*v || *end || x < lo || x > hi) {
    return Status::InvalidArgument(std::string(name) + "='" + v + "' must be an integer in [" + std::to_string(lo) +
                                   ", " + std::to_string(hi) + "]");
  }
  return static_cast<int>(x);
}

// Waits until something accepts connections at addr:port, trying every
// 10 ms. libtorch 1.13's TCPStore client, refused because rank 0 has not
// bound its port yet, sleeps a whole second before it tries again: that
// second was most of a restart's rendezvous (docs/recovery.md). Connecting
// only once the store listens leaves its retry unused. False when
// `timeout` passed (the store's own connect then reports the error).
bool AwaitListener(const std::string& addr, int port, std::chrono::milliseconds timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || res == nullptr) return false;
  const auto end = std::chrono::steady_clock::now() + timeout;
  bool up = false;
  while (!up && std::chrono::steady_clock::now() < end) {
    for (addrinfo* a = res; a != nullptr && !up; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      up = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0;
      ::close(fd);
    }
    if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::freeaddrinfo(res);
  return up;
}

// Where Gloo's transport binds: the interface GLOO_SOCKET_IFNAME names (as
// torch.distributed reads it; the agent sets it to a machine's own link),
// else loopback for a rendezvous on this host, else what the hostname
// resolves to.
std::shared_ptr<::gloo::transport::Device> GlooDevice(const std::string& master_addr) {
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  if (ifname != nullptr && *ifname != '\0') return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  if (master_addr == "127.0.0.1" || master_addr == "localhost") {
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  }
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

// The ring's sockets and Gloo's point-to-point messages read and write host
// memory by pointer; Gloo's collectives take a GPU's tensors themselves. So
// a device tensor on those paths (a CUDA rank's pipeline activations, an
// elastic ring's gradients) goes through a host copy, and comes back only
// when the operation succeeded. CPU tensors are used in place.
bool AllOnHost(const std::vector<torch::Tensor>& ts) {
  return std::all_of(ts.begin(), ts.end(), [](const torch::Tensor& t) { return t.is_cpu(); });
}

template <typename Op>
Status ThroughHost(std::vector<torch::Tensor>& ts, Op op) {
  if (AllOnHost(ts)) return op(ts);
  std::vector<torch::Tensor> host;
  for (const auto& t : ts) host.push_back(t.is_cpu() ? t : t.to(torch::kCPU));
  BULWARK_RETURN_IF_ERROR(op(host));
  for (size_t i = 0; i < ts.size(); ++i) {
    if (!ts[i].is_cpu()) ts[i].copy_(host[i]);
  }
  return Status::OK();
}

}  // namespace

Result<DistEnv> ReadDistEnv() {
  const char* names[] = {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};
  int set = 0;
  for (const char* n : names) set += std::getenv(n) != nullptr;
  DistEnv env;
  if (set == 0) return env;
  if (set != 4) {
    std::string missing;
    for (const char* n : names)
      if (!std::getenv(n)) missing += std::string(missing.empty() ? "" : ", ") + n;
    return Status::InvalidArgument("distributed environment is incomplete: " + missing +
                                   " not set (set all of RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, or none)");
  }
  auto world = EnvInt("WORLD_SIZE", 1, 1 << 20);
  if (!world.ok()) return world.status();
  auto rank = EnvInt("RANK", 0, *world - 1);
  if (!rank.ok()) return rank.status();
  // Port 0 asks rank 0 to pick a free port and announce it (Connect), so a
  // launcher never races another process for a port it guessed was free.
  auto port = EnvInt("MASTER_PORT", *rank == 0 ? 0 : 1, 65535);
  if (!port.ok()) return port.status();
  env.world_size = *world;
  env.rank = *rank;
  env.master_port = *port;
  env.master_addr = std::getenv("MASTER_ADDR");
  if (std::getenv("LOCAL_RANK")) {
    auto lr = EnvInt("LOCAL_RANK", 0, 1 << 20);
    if (!lr.ok()) return lr.status();
    env.local_rank = *lr;
  }
  return env;
}

Result<std::unique_ptr<Comm>> Comm::Connect(const DistEnv& env, double timeout_s, RingLinks* ring) {
  std::unique_ptr<Comm> c(new Comm());
  c->env_ = env;
  c->timeout_s_ = timeout_s;
  if (env.world_size == 1) return c;
  auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  try {
    // One deadline for the whole rendezvous: waiting for the listener
    // and then the store's own connect must not take twice the timeout.
    if (env.rank != 0 && !AwaitListener(env.master_addr, env.master_port, timeout)) {
      return Status::Unavailable("rendezvous at " + env.master_addr + ":" + std::to_string(env.master_port) +
                                 " failed for rank " + std::to_string(env.rank) + " of " +
                                 std::to_string(env.world_size) + ": no rank 0 listening after " +
                                 std::to_string(timeout.count()) + " ms");
    }
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<uint16_t>(env.master_port);
    opts.isServer = env.rank == 0;
    opts.numWorkers = env.world_size;
    opts.waitWorkers = env.master_port != 0;
    opts.timeout = timeout;
    auto tcp = c10::make_intrusive<c10d::TCPStore>(env.master_addr, opts);
    c->store_ = tcp;
    if (env.master_port == 0) {
      // The kernel chose the port while binding: announce it for the
      // launcher to hand to the other ranks, then wait for them.
      c->env_.master_port = tcp->getPort();
      std::printf("{\"event\":\"rendezvous\",\"port\":%d}\n", c->env_.master_port);
      std::fflush(stdout);
      tcp->waitForWorkers();
    }
    if (ring != nullptr) {
      auto r = Ring::Form(*c->store_, env.rank, env.world_size, timeout_s, *ring);
      if (!r.ok()) return r.status();
      c->ring_ = std::move(*r);
      return c;
    }
    auto o = c10d::ProcessGroupGloo::Options::create(timeout);
    o->devices.push_back(GlooDevice(env.master_addr));
    c->pg_ = c10::make_intrusive<c10d::ProcessGroupGloo>(c->store_, env.rank, env.world_size, o);
  } catch (const std::exception& e) {
    return Status::Unavailable("rendezvous at " + env.master_addr + ":" + std::to_string(env.master_port) +
                               " failed for rank " + std::to_string(env.rank) + " of " +
                               std::to_string(env.world_size) + ": " + e.what());
  }
  return c;
}

Result<std::unique_ptr<Comm>> Comm::Join(const DistEnv& env, const RingPlan& plan, double timeout_s,
                                         RingLinks& ring) {
  std::unique_ptr<Comm> c(new Comm());
  c->env_ = env;
  if (env.world_size == 1) return c;
  auto r = Ring::Form(plan, env.rank, env.world_size, timeout_s, ring);
  if (!r.ok()) return r.status();
  c->ring_ = std::move(*r);
  return c;
}

Result<std::unique_ptr<Comm>> Comm::Subgroup(const std::string& name, const std::vector<int>& ranks,
                                             double timeout_s, RingLinks* links, const RingPlan* plan) {
  std::unique_ptr<Comm> c(new Comm());
  auto it = std::find(ranks.begin(), ranks.end(), env_.rank);
  if (it == ranks.end()) return Status::Internal("rank " + std::to_string(env_.rank) + " is not in group " + name);
  c->env_ = env_;
  c->timeout_s_ = timeout_s;
  c->env_.rank = static_cast<int>(it - ranks.begin());
  c->env_.world_size = static_cast<int>(ranks.size());
  if (ring_ && !store_ && ranks.size() > 1) {
    if (plan == nullptr || links == nullptr) {
      return Status::FailedPrecondition("group " + name + ": a generation joined from a plan (no store) forms "
                                        "a subgroup only from a plan of the group's ring");
    }
    auto r = Ring::Form(*plan, c->env_.rank, c->env_.world_size, timeout_s, *links);
    if (!r.ok()) return r.status();
    c->ring_ = std::move(*r);
    return c;
  }
  if (ranks.size() == 1 || !store_) return c;
  if (ring_ && links == nullptr) return Status::Internal("a ring's subgroup needs links of its own (group " + name + ")");
  try {
    if (ring_) {
      c->store_ = c10::make_intrusive<c10d::PrefixStore>(name, store_);
      auto r = Ring::Form(*c->store_, c->env_.rank, c->env_.world_size, timeout_s, *links);
      if (!r.ok()) return r.status();
      c->ring_ = std::move(*r);
      return c;
    }
    auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    auto o = c10d::ProcessGroupGloo::Options::create(timeout);
    o->devices.push_back(GlooDevice(env_.master_addr));
    c->store_ = c10::make_intrusive<c10d::PrefixStore>(name, store_);
    c->pg_ = c10::make_intrusive<c10d::ProcessGroupGloo>(c->store_, c->env_.rank, c->env_.world_size, o);
  } catch (const std::exception& e) {
    return Status::Unavailable("forming group " + name + " failed on rank " + std::to_string(env_.rank) + ": " +
                               e.what());
  }
  return c;
}

Status Comm::Send(const torch::Tensor& t_in, int dst, int tag) {
  const torch::Tensor t = t_in.is_cpu() ? t_in : t_in.to(torch::kCPU);  // kept until WaitSends, like t_in
  if (ring_) return ring_->Send(t, dst, tag);
  if (!pg_) return Status::Internal("send in a world of one");
  try {
    send_tensors_.push_back({t.contiguous()});
    sends_.push_back(pg_->send(send_tensors_.back(), dst, tag));
  } catch (const std::exception& e) {
    return Fail("send to rank " + std::to_string(dst), e);
  }
  return Status::OK();
}

Status Comm::Recv(torch::Tensor& t, int src, int tag) {
  if (!t.is_cpu()) {
    auto host = torch::empty(t.sizes(), t.options().device(torch::kCPU));
    BULWARK_RETURN_IF_ERROR(Recv(host, src, tag));
    t.copy_(host);
    return Status::OK();
  }
  if (ring_) return ring_->Recv(t, src, tag);
  if (!pg_) return Status::Internal("recv in a world of one");
  try {
    std::vector<at::Tensor> v{t};
    pg_->recv(v, src, tag)->wait();
  } catch (const std::exception& e) {
    return Fail("receive from rank " + std::to_string(src), e);
  }
  return Status::OK();
}

Status Comm::WaitSends() {
  if (ring_) return ring_->WaitSends();
  try {
    for (auto& w : sends_) w->wait();
  } catch (const std::exception& e) {
    sends_.clear();
    send_tensors_.clear();
    return Fail("send", e);
  }
  sends_.clear();
  send_tensors_.clear();
  return Status::OK();
}

Status Comm::Fail(const std::string& op, const std::exception& e) {
  std::string what = e.what();
  if (auto nl = what.find('\n'); nl != std::string::npos) what.resize(nl);  // c10 appends a backtrace
  return Status::Unavailable(op + " failed on rank " + std::to_string(env_.rank) +
                             " (a peer died, hung or was cut off): " + what);
}

#ifdef BULWARK_NCCL
struct Comm::Nccl {
  std::unique_ptr<NcclGroup> group;
  int device_index;
};

Status Comm::UseNccl(int device_index) {
  if (!pg_ || !store_) return Status::FailedPrecondition("NCCL needs a world of more than one rank formed through the store");
  // The store is this generation's (rank 0 hosts a new one each time), so
  // the key needs no generation in it.
  const std::string key = "bulwark/nccl-unique-id";
  // Rank 0 publishes its id; the others wait for it in the store (its own
  // timeout, --dist-timeout, bounds the wait).
  auto exchange = [&](const std::string& mine) -> Result<std::string> {
    try {
      if (env_.rank == 0) {
        store_->set(key, std::vector<uint8_t>(mine.begin(), mine.end()));
        return mine;
      }
      const std::vector<uint8_t> got = store_->get(key);
      return std::string(got.begin(), got.end());
    } catch (const std::exception& e) {
      std::string what = e.what();
      if (auto nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
      return Status::Unavailable("the store: " + what);
    }
  };
  auto group = NcclGroup::Create(env_.rank, env_.world_size, device_index, exchange, timeout_s_);
  if (!group.ok()) return group.status();
  nccl_ = std::make_unique<Nccl>(Nccl{std::move(*group), device_index});
  return Status::OK();
}

Status Comm::NcclAllReduce(std::vector<torch::Tensor>& tensors) {
  void* stream = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(nccl_->device_index)).stream();
  return nccl_->group->AllReduceSum(tensors, stream);
}
#else
struct Comm::Nccl {};

Status Comm::UseNccl(int) {
  return Status::FailedPrecondition("this bulwark-train was built without NCCL (BULWARK_NCCL is off)");
}

Status Comm::NcclAllReduce(std::vector<torch::Tensor>&) { return Status::Internal("NCCL is not built in"); }
#endif

Comm::~Comm() = default;  // here, where Nccl is complete

Status Comm::AllReduceSum(std::vector<torch::Tensor>& tensors) { return AllReduce(tensors, /*max=*/false); }
Status Comm::AllReduceMax(std::vector<torch::Tensor>& tensors) { return AllReduce(tensors, /*max=*/true); }

Status Comm::AllReduce(std::vector<torch::Tensor>& tensors, bool max) {
  const auto on_gpu = [](const torch::Tensor& t) { return t.is_cuda(); };
  if (nccl_ && !max && !tensors.empty() && std::all_of(tensors.begin(), tensors.end(), on_gpu)) {
    return NcclAllReduce(tensors);
  }
  if (ring_) return ThroughHost(tensors, [&](std::vector<torch::Tensor>& h) { return ring_->AllReduce(h, max); });
  if (!pg_) return Status::OK();
  try {
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    std::vector<std::vector<at::Tensor>> holders(tensors.size());
    c10d::AllreduceOptions opts;
    opts.reduceOp = max ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM;
    for (size_t i = 0; i < tensors.size(); ++i) {
      holders[i] = {tensors[i]};
      works.push_back(pg_->allreduce(holders[i], opts));
    }
    // Every one waited for, even after one failed: a collective left queued
    // in Gloo would still write into these tensors after this returned,
    // while a rank that stays in its process restores them.
    std::optional<Status> failed;
    for (auto& w : works) {
      try {
        w->wait();
      } catch (const std::exception& e) {
        if (!failed) failed = Fail("all-reduce", e);
      }
    }
    if (failed) return *failed;
  } catch (const std::exception& e) {
    return Fail("all-reduce", e);
  }
  return Status::OK();
}

Status Comm::AllGatherChunks(torch::Tensor& flat) {
  if (ring_) {
    std::vector<torch::Tensor> v{flat};
    return ThroughHost(v, [&](std::vector<torch::Tensor>& h) { return ring_->AllGatherChunks(h[0]); });
  }
  if (!pg_) return Status::OK();
  // Gloo gathers equal tensors: each rank's chunk goes out in a slot of the
  // longest chunk's length and comes back to its place in `flat`.
  try {
    const int W = env_.world_size;
    torch::Tensor all = flat.view({-1});
    const int64_t n = all.numel(), slot = (n + W - 1) / W;
    const Span mine = ChunkOf(n, W, env_.rank);
    std::vector<at::Tensor> input{torch::zeros({slot}, all.options())};
    input[0].narrow(0, 0, mine.size()).copy_(all.slice(0, mine.begin, mine.end));
    std::vector<std::vector<at::Tensor>> output(1);
    for (int r = 0; r < W; ++r) output[0].push_back(torch::empty({slot}, all.options()));
    pg_->allgather(output, input)->wait();
    for (int r = 0; r < W; ++r) {
      const Span s = ChunkOf(n, W, r);
      all.slice(0, s.begin, s.end).copy_(output[0][r].narrow(0, 0, s.size()));
    }
  } catch (const std::exception& e) {
    return Fail("all-gather", e);
  }
  return Status::OK();
}

Status Comm::Broadcast(torch::Tensor& t, int root) {
  if (ring_) {
    std::vector<torch::Tensor> v{t};
    return ThroughHost(v, [&](std::vector<torch::Tensor>& h) { return ring_->Broadcast(h[0], root); });
  }
  if (!pg_) return Status::OK();
  try {
    std::vector<at::Tensor> v{t};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    pg_->broadcast(v, o)->wait();
  } catch (const std::exception& e) {
    return Fail("broadcast", e);
  }
  return Status::OK();
}

Status Comm::RecvNeverSent() {
  if (ring_) return ring_->RecvNeverSent();
  if (!pg_) return Status::OK();
  try {
    std::vector<at::Tensor> v{torch::zeros({1})};
    // A tag no collective uses: nothing will ever arrive on it.
    pg_->recv(v, (env_.rank + 1) % env_.world_size, /*tag=*/0x5eed)->wait();
  } catch (const std::exception& e) {
    return Fail("recv", e);
  }
  return Status::OK();
}

Status Comm::Barrier() {
  if (ring_) {
    std::vector<torch::Tensor> one{torch::zeros({1})};
    return ring_->AllReduce(one, /*max=*/false);
  }
  if (!pg_) return Status::OK();
  try {
    pg_->barrier()->wait();
  } catch (const std::exception& e) {
    return Fail("barrier", e);
  }
  return Status::OK();
}

}  // namespace bulwark::trainer
