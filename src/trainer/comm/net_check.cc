#include "trainer/comm/net_check.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "trainer/comm/dist.h"

namespace bulwark::trainer {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kBigFloats = 1 << 20;  // 4 MB
constexpr int kBigRounds = 8;
constexpr int kSmallRounds = 50;

// One timed all-reduce of `t` (every element 1 on every rank) whose sum
// must be the world size everywhere; `slow` > 1 stretches it (the hook).
Status TimedAllReduce(Comm& comm, torch::Tensor& t, double slow, double* ms) {
  t.fill_(1.0f);
  const auto t0 = Clock::now();
  std::vector<torch::Tensor> v = {t};
  BULWARK_RETURN_IF_ERROR(comm.AllReduceSum(v));
  if (slow > 1) {
    const auto took = Clock::now() - t0;
    std::this_thread::sleep_for(std::chrono::duration_cast<Clock::duration>(took * (slow - 1)));
  }
  *ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  const float want = static_cast<float>(comm.world_size());
  const float lo = t.min().item<float>(), hi = t.max().item<float>();
  if (lo != want || hi != want) {
    return Status::Corrupt("net-check: an all-reduce summed to " + std::to_string(lo) + ".." + std::to_string(hi) +
                            " instead of " + std::to_string(want) + ": the link corrupts data");
  }
  return Status::OK();
}

}  // namespace

Status RunNetCheck(double timeout_s) {
  auto env = ReadDistEnv();
  if (!env.ok()) return env.status();
  if (env->world_size != 2) {
    return Status::InvalidArgument("--net-check measures one link: run it as RANK 0 and 1 of WORLD_SIZE=2 (got " +
                                   std::to_string(env->world_size) + ")");
  }
  double slow = 0;
  if (const char* s = std::getenv("BULWARK_NET_SLOW")) slow = std::atof(s);
  auto comm_or = Comm::Connect(*env, timeout_s);
  if (!comm_or.ok()) return comm_or.status();
  Comm& comm = **comm_or;
  torch::Tensor big = torch::empty({kBigFloats}, torch::kFloat32), small = torch::empty({1}, torch::kFloat32);
  double warm = 0;  // connections set up, buffers paged in: not measured
  BULWARK_RETURN_IF_ERROR(TimedAllReduce(comm, big, 0, &warm));
  BULWARK_RETURN_IF_ERROR(TimedAllReduce(comm, small, 0, &warm));
  double big_ms = 0, small_ms = 0;
  for (int i = 0; i < kBigRounds; ++i) BULWARK_RETURN_IF_ERROR(TimedAllReduce(comm, big, slow, &big_ms));
  for (int i = 0; i < kSmallRounds; ++i) BULWARK_RETURN_IF_ERROR(TimedAllReduce(comm, small, slow, &small_ms));
  BULWARK_RETURN_IF_ERROR(comm.Barrier());
  const double mb = static_cast<double>(kBigFloats) * 4 * kBigRounds / 1e6;
  std::printf("{\"net_check\":\"ok\",\"ms\":%.3f,\"mb_per_s\":%.1f,\"latency_us\":%.1f,\"rank\":%d}\n",
              big_ms + small_ms, mb / (big_ms / 1e3), small_ms * 1e3 / kSmallRounds, comm.rank());
  std::fflush(stdout);
  return Status::OK();
}

}  // namespace bulwark::trainer
