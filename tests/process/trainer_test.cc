// bulwark-train as a user runs it: real processes, real Gloo rendezvous over
// loopback, real files. The tiny preset keeps each run to seconds.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/files.h"
#include "support/trainer_fixture.h"
#include "trainer/state/checkpoint_dir.h"

namespace bulwark {
namespace {

using testing::ProcessResult;
using testing::Trainer;
using nlohmann::json;

// ---------------------------------------------------------------- learning

TEST_F(Trainer, LossFallsOnTinyConfig) {
  auto r = testing::Run(Args({"--steps", "150", "--eval-every", "150"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<double> val;
  for (size_t p = 0, e; p < r.out.size(); p = e + 1) {
    e = r.out.find('\n', p);
    json j = json::parse(r.out.substr(p, e - p), nullptr, false);
    if (j.value("event", "") == "eval") val.push_back(j["val_loss"].get<double>());
  }
  ASSERT_EQ(val.size(), 2u) << r.out;
  EXPECT_NEAR(val[0], std::log(512.0), 0.3);  // untrained: about uniform
  EXPECT_LT(val[1], val[0] - 1.0) << "validation loss " << val[0] << " -> " << val[1];
}

// ---------------------------------------------------------------- exact resume

struct ResumeCase {
  int ranks;
  bool sharded;
  int stop_at;
  const char* precision;
  int pp = 1;  // pipeline stages (ranks = DP x PP), 2 micro-batches when > 1
  int threads = 1;  // intra-op threads per rank
};

void PrintTo(const ResumeCase& c, std::ostream* os) {
  *os << c.ranks << " rank(s)" << (c.sharded ? ", sharded" : "") << ", stop at " << c.stop_at << ", "
      << c.precision << (c.pp > 1 ? ", pp " + std::to_string(c.pp) : "") << ", " << c.threads << " thread(s)";
}

class ExactResume : public Trainer, public ::testing::WithParamInterface<ResumeCase> {};

// Training is deterministic, so a resumed run that silently started over
// would also end on the straight run's checksum: the step it resumed from
// (the start event's start_step) is checked too.
TEST_P(ExactResume, StopAndResumeIsBitwiseEqualToStraight) {
  auto [ranks, sharded, stop_at, precision, pp, threads] = GetParam();
  std::vector<std::string> common = {"--steps", "24", "--ckpt-every", "8", "--batch-size", "4", "--precision",
                                     precision, "--threads", std::to_string(threads)};
  if (pp > 1) common.insert(common.end(), {"--pp", std::to_string(pp), "--micro-batches", "2"});
  if (sharded) common.push_back("--shard-optimizer");
  auto with = [&](std::vector<std::string> more) {
    auto a = common;
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  std::string straight = Checksum(Launch(ranks, with({"--ckpt-dir", dir_ + "/a"})), 24);
  Checksum(Launch(ranks, with({"--ckpt-dir", dir_ + "/b", "--stop-at", std::to_string(stop_at)})), stop_at);
  auto resumed = Launch(ranks, with({"--ckpt-dir", dir_ + "/b", "--resume"}));
  EXPECT_EQ(StartStep(resumed[0]), stop_at / 8 * 8) << "not resumed from the newest checkpoint:\n" << resumed[0].out;
  EXPECT_EQ(Checksum(resumed, 24), straight);
}

INSTANTIATE_TEST_SUITE_P(Layouts, ExactResume,
                         ::testing::Values(ResumeCase{1, false, 16, "fp32"}, ResumeCase{1, false, 13, "fp32"},
                                           ResumeCase{2, false, 16, "fp32"}, ResumeCase{2, true, 13, "fp32"},
                                           ResumeCase{1, false, 13, "bf16"}, ResumeCase{2, true, 13, "bf16"},
                                           ResumeCase{4, false, 13, "fp32", 2}, ResumeCase{4, true, 13, "bf16", 2},
                                           ResumeCase{1, false, 13, "fp32", 1, 2}),
                         [](const auto& info) {
                           return std::to_string(info.param.ranks) + "Ranks" + (info.param.sharded ? "Sharded" : "") +
                                  "StopAt" + std::to_string(info.param.stop_at) + "_" + info.param.precision +
                                  (info.param.pp > 1 ? "_PP" + std::to_string(info.param.pp) : "") +
                                  (info.param.threads > 1 ? "_" + std::to_string(info.param.threads) + "Threads" : "");
                         });

// ---------------------------------------------------------------- precision

// The loss of each step, from the json step lines.
std::vector<double> StepLosses(const ProcessResult& r) {
  std::vector<double> out;
  for (size_t p = 0, e; p < r.out.size(); p = e + 1) {
    e = r.out.find('\n', p);
    if (e == std::string::npos) e = r.out.size();
    json j = json::parse(r.out.substr(p, e - p), nullptr, false);
    if (j.is_object() && j.value("event", "") == "step") out.push_back(j["loss"].get<double>());
  }
  return out;
}

// bf16 rounds every matmul input to 8 bits of mantissa; over 40 steps of the
// tiny model the loss may drift from fp32's by a few hundredths, never more
// than 0.05 (measured on this host: 0.0004), and both must learn.
TEST_F(Trainer, Bf16LossTracksFp32WithinTolerance) {
  auto fp32 = testing::Run(Args({"--steps", "40", "--precision", "fp32"}));
  auto bf16 = testing::Run(Args({"--steps", "40", "--precision", "bf16"}));
  ASSERT_EQ(fp32.exit_code, 0) << fp32.err;
  ASSERT_EQ(bf16.exit_code, 0) << bf16.err;
  auto a = StepLosses(fp32), b = StepLosses(bf16);
  ASSERT_EQ(a.size(), 40u);
  ASSERT_EQ(b.size(), 40u);
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  EXPECT_LT(worst, 0.05);
  EXPECT_GT(worst, 0.0) << "bf16 gave fp32's losses bit for bit: was it applied?";
  EXPECT_LT(b.back(), b.front() - 1.0);
}

TEST_F(Trainer, Bf16RunsWithTheSameSeedAreBitwiseEqual) {
  auto one = Launch(1, {"--steps", "12", "--precision", "bf16"});
  auto two = Launch(1, {"--steps", "12", "--precision", "bf16"});
  auto fp32 = Launch(1, {"--steps", "12", "--precision", "fp32"});
  std::string a = Checksum(one, 12), b = Checksum(two, 12), c = Checksum(fp32, 12);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST_F(Trainer, BadPrecisionIsOneLineError) {
  auto r = testing::Run(Args({"--precision", "fp16"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--precision 'fp16' is not one of: auto, bf16, fp32"), std::string::npos) << r.err;
}

// --device (trainer/model/device.h): this build has no CUDA (Debian's libtorch).
TEST_F(Trainer, DeviceCpuAndAutoTrainOnTheCpuAndSaySo) {
  auto cpu = Launch(1, {"--steps", "3", "--device", "cpu"});
  auto dflt = Launch(1, {"--steps", "3"});
  auto autod = Launch(1, {"--steps", "3", "--device", "auto"});
  EXPECT_EQ(Checksum(cpu, 3), Checksum(dflt, 3));
  EXPECT_EQ(Checksum(autod, 3), Checksum(dflt, 3));
  auto start = testing::Events(autod[0], "start");
  ASSERT_EQ(start.size(), 1u);
  EXPECT_EQ(start[0].value("device", ""), "cpu (auto: this build has no CUDA)");
  auto cpu_start = testing::Events(cpu[0], "start");
  ASSERT_EQ(cpu_start.size(), 1u);
  EXPECT_EQ(cpu_start[0].value("device", ""), "cpu (--device cpu)");
}

TEST_F(Trainer, DeviceCudaOnACpuBuildIsOneLineError) {
  auto r = testing::Run(Args({"--device", "cuda", "--ckpt-dir", dir_ + "/c", "--ckpt-every", "1"}));
  testing::ExpectUsageError(r, "--device cuda: this bulwark-train was built against a libtorch without CUDA");
  EXPECT_NE(r.err.find("use --device cpu"), std::string::npos) << r.err;
  EXPECT_FALSE(PathExists(dir_ + "/c"));
  // Before the pipeline's own path, too.
  testing::ExpectUsageError(testing::Run(Args({"--device", "cuda", "--pp", "2"})), "without CUDA");
}

TEST_F(Trainer, BadDeviceIsOneLineErrorListingTheChoices) {
  auto r = testing::Run(Args({"--device", "gpu"}));
  testing::ExpectUsageError(r, "--device 'gpu' is not one of: auto, cpu, cuda");
}

// --dist-backend: an unknown value, and NCCL asked of a CPU rank, are usage
// errors in one line; auto on the CPU says in the start event why Gloo.
TEST_F(Trainer, DistBackendNcclOnACpuRankIsOneLineError) {
  testing::ExpectUsageError(testing::Run(Args({"--dist-backend", "mpi"})),
                            "--dist-backend 'mpi' is not one of: auto, gloo, nccl");
  testing::ExpectUsageError(testing::Run(Args({"--dist-backend", "nccl", "--steps", "2"})),
                            "--dist-backend nccl: the rank trains on the CPU");
  auto ok = testing::Run(Args({"--steps", "2", "--log-format", "json"}));
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  auto start = testing::Events(ok, "start");
  ASSERT_EQ(start.size(), 1u) << ok.out;
  EXPECT_EQ(start[0].value("dist_backend", ""), "gloo (auto: the rank trains on the CPU (NCCL reduces GPU memory; use --device cuda))");
}

// ---------------------------------------------------------------- data parallel

TEST_F(Trainer, TwoRanksOfBatchBMatchOneRankOfBatch2B) {
  // fp32: the comparison is of float summation order; bf16 rounds each
  // rank's smaller batch differently (its own tests are below).
  auto one = Launch(1, {"--steps", "10", "--batch-size", "8", "--ckpt-dir", dir_ + "/one", "--ckpt-every", "10",
                        "--precision", "fp32"});
  Checksum(one, 10);
  auto two = Launch(2, {"--steps", "10", "--batch-size", "4", "--ckpt-dir", dir_ + "/two", "--ckpt-every", "10",
                        "--precision", "fp32"});
  Checksum(two, 10);
  auto a = SavedParams(dir_ + "/one", 10), b = SavedParams(dir_ + "/two", 10);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  double max_diff = 0;
  for (size_t i = 0; i < a.size(); ++i) max_diff = std::max(max_diff, double(std::fabs(a[i] - b[i])));
  EXPECT_LT(max_diff, 2e-4) << "parameters differ beyond float reordering";
  // Adam's update is invariant to the gradient's scale, so equal parameters
  // do not show that the ranks' summed gradients were divided by the world
  // size. The step lines' grad norm (of the all-reduced gradient, before
  // clipping) and loss do: a missing division doubles both.
  auto one_steps = testing::Events(one[0], "step"), two_steps = testing::Events(two[0], "step");
  ASSERT_EQ(one_steps.size(), 10u);
  ASSERT_EQ(two_steps.size(), 10u);
  for (size_t i = 0; i < one_steps.size(); ++i) {
    const double g1 = one_steps[i]["grad_norm"], g2 = two_steps[i]["grad_norm"];
    EXPECT_NEAR(g2 / g1, 1.0, 1e-3) << "step " << i + 1 << ": grad norm " << g1 << " (1 rank) vs " << g2;
    EXPECT_NEAR(two_steps[i]["loss"].get<double>(), one_steps[i]["loss"].get<double>(), 1e-4) << "step " << i + 1;
  }
}

TEST_F(Trainer, ShardedCheckpointReshardsToAnotherWorldSize) {
  // Two sharded ranks of batch 4 train 8 steps at twice the learning rate
  // the rest of the run uses, so no run that starts from step 0 can end
  // where the resumed ones do. Their checkpoint is resumed twice: by the
  // same two ranks (the reference) and by one rank of batch 8 (same global
  // batch and data), whose optimizer state comes from both shard files.
  auto at = [&](const std::string& ckpt, std::vector<std::string> more) {
    std::vector<std::string> a = {"--steps", "16", "--shard-optimizer", "--ckpt-dir", ckpt, "--ckpt-every", "8",
                                  "--precision", "fp32"};
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  Checksum(Launch(2, at(dir_ + "/r", {"--batch-size", "4", "--lr", "1e-2", "--stop-at", "8"})), 8);
  std::filesystem::copy(dir_ + "/r", dir_ + "/ref", std::filesystem::copy_options::recursive);
  auto reference = Launch(2, at(dir_ + "/ref", {"--batch-size", "4", "--resume"}));
  Checksum(reference, 16);
  auto resumed = Launch(1, at(dir_ + "/r", {"--batch-size", "8", "--resume"}));
  Checksum(resumed, 16);
  EXPECT_EQ(StartStep(reference[0]), 8);
  EXPECT_EQ(StartStep(resumed[0]), 8);
  auto fresh = Launch(1, at(dir_ + "/fresh", {"--batch-size", "8"}));
  Checksum(fresh, 16);
  auto max_diff = [](const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    double d = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, double(std::fabs(a[i] - b[i])));
    return d;
  };
  auto ref = SavedParams(dir_ + "/ref", 16);
  ASSERT_FALSE(ref.empty());
  EXPECT_LT(max_diff(ref, SavedParams(dir_ + "/r", 16)), 2e-4) << "resharded state diverged from the reference";
  EXPECT_GT(max_diff(ref, SavedParams(dir_ + "/fresh", 16)), 1e-2) << "a fresh start should end elsewhere";
}

TEST_F(Trainer, DeadPeerEndsSurvivorWithPeerLostExitCode) {
  auto ranks = testing::StartRanks(Args({"--steps", "100000", "--dist-timeout", "20"}), 2);
  ASSERT_EQ(ranks.size(), 2u) << ranks[0]->Wait().err;
  testing::Process& r0 = *ranks[0];
  testing::Process& r1 = *ranks[1];
  // Kill rank 1 once the pair is training (rank 0 has logged a step).
  ASSERT_TRUE(r0.WaitForOutput("\"event\":\"step\"", 120)) << r0.OutputSoFar();
  ::kill(r1.pid(), SIGKILL);
  auto t0 = std::chrono::steady_clock::now();
  auto res = r0.Wait(30);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(res.exit_code, 3) << res.err;
  EXPECT_NE(res.err.find("a peer died"), std::string::npos) << res.err;
  EXPECT_LT(took, 20.0);
  r1.Wait(5);
}

// ---------------------------------------------------------------- elastic data parallel

// The job's full width is 4 replicas of 2 micro-batches; runs at widths 4,
// 3, 2 and 1 take the same global batch of 8 micro-batches in the same order, and the exact
// reduction (elastic.h) makes them compute the same bits: the same
// checksum, the same loss and grad norm at every step, the same eval loss.
TEST_F(Trainer, ElasticRunsAtEveryWidthComputeTheSameBits) {
  std::vector<std::string> flags = {"--steps", "12", "--batch-size", "4", "--elastic-replicas", "4", "--micro-batches",
                                    "2", "--precision", "fp32", "--eval-every", "6", "--eval-batches", "2"};
  std::string want;
  std::vector<json> want_steps;
  for (int width : {4, 3, 2, 1}) {
    auto run = Launch(width, flags);
    const std::string sum = Checksum(run, 12);
    auto steps = testing::Events(run[0], "step");
    ASSERT_EQ(steps.size(), 12u) << run[0].out;
    if (width == 4) {
      want = sum;
      want_steps = steps;
      continue;
    }
    EXPECT_EQ(sum, want) << "width " << width << " of 4 computed other parameters";
    for (size_t i = 0; i < steps.size(); ++i) {
      EXPECT_EQ(steps[i]["loss"].get<double>(), want_steps[i]["loss"].get<double>()) << "width " << width << " step " << i + 1;
      EXPECT_EQ(steps[i]["grad_norm"].get<double>(), want_steps[i]["grad_norm"].get<double>()) << "width " << width;
    }
    auto evals = testing::Events(run[0], "eval");
    ASSERT_FALSE(evals.empty()) << run[0].out;
  }
}

// Any width, beyond the dozen the padded buffer once allowed: every flat
// buffer splits into parts that differ by one element (dist.h's ChunkOf),
// so 16 single-micro-batch replicas computed on 16, 4 or 3 ranks, and 24 on
// 24 or 7, end on the same bits (3 and 7 divide neither the micro-batches
// nor the buffer). One step per width reaches the same loss too.
TEST_F(Trainer, ElasticRunsBeyondTwelveReplicasComputeTheSameBits) {
  for (const auto& [replicas, widths] : std::vector<std::pair<int, std::vector<int>>>{{16, {16, 4, 3}}, {24, {24, 7}}}) {
    const std::vector<std::string> flags = {"--steps", "3", "--batch-size", "1", "--elastic-replicas",
                                            std::to_string(replicas), "--micro-batches", "1", "--precision", "fp32",
                                            "--memory-ckpt", "off"};
    std::string want;
    std::vector<json> want_steps;
    for (int width : widths) {
      auto run = Launch(width, flags);
      const std::string sum = Checksum(run, 3);
      auto steps = testing::Events(run[0], "step");
      ASSERT_EQ(steps.size(), 3u) << run[0].out << run[0].err;
      if (want.empty()) {
        want = sum;
        want_steps = steps;
        continue;
      }
      EXPECT_EQ(sum, want) << width << " of " << replicas << " replicas computed other parameters";
      for (size_t i = 0; i < steps.size(); ++i) {
        EXPECT_EQ(steps[i]["loss"].get<double>(), want_steps[i]["loss"].get<double>()) << width << " step " << i + 1;
      }
    }
  }
}

// ZeRO-1 elastic replicas (elastic_zero.h): each rank updates its part of
// the buffer, cut unevenly at widths 3 and 2, and the parameters are those
// of the replicas that each update the whole buffer.
TEST_F(Trainer, ElasticZeroOneComputesTheUnshardedBitsAtEveryWidth) {
  const std::vector<std::string> flags = {"--steps", "6", "--batch-size", "2", "--elastic-replicas", "4",
                                          "--precision", "fp32", "--memory-ckpt", "off"};
  auto sharded = flags;
  sharded.push_back("--shard-optimizer");
  const std::string want = Checksum(Launch(4, flags), 6);
  for (int width : {4, 3, 2}) EXPECT_EQ(Checksum(Launch(width, sharded), 6), want) << "ZeRO-1 at width " << width;
}

// Replicas that are whole pipelines (elastic_pipeline.h): 3 replicas of 2
// stages at full width, and 2 or 1 of them on fewer ranks, compute the
// same bits, step by step, and the same validation loss, over the rings
// (the default) or Gloo.
TEST_F(Trainer, ElasticPipelinesAtEveryWidthComputeTheSameBits) {
  std::vector<std::string> flags = {"--steps", "10", "--batch-size", "4", "--elastic-replicas", "3", "--pp", "2",
                                    "--micro-batches", "2", "--precision", "fp32", "--eval-every", "5",
                                    "--eval-batches", "2"};
  std::string want;
  std::vector<json> want_steps, want_evals;
  for (int replicas : {3, 2, 1}) {
    auto run = Launch(2 * replicas, flags);
    const std::string sum = Checksum(run, 10);
    auto steps = testing::Events(run[0], "step"), evals = testing::Events(run[0], "eval");
    ASSERT_EQ(steps.size(), 10u) << run[0].out << run[0].err;
    ASSERT_EQ(evals.size(), 3u) << run[0].out;
    if (replicas == 3) {
      want = sum;
      want_steps = steps;
      want_evals = evals;
      continue;
    }
    EXPECT_EQ(sum, want) << replicas << " of 3 pipelines computed other parameters";
    for (size_t i = 0; i < steps.size(); ++i) {
      EXPECT_EQ(steps[i]["loss"].get<double>(), want_steps[i]["loss"].get<double>()) << replicas << " step " << i + 1;
      EXPECT_EQ(steps[i]["grad_norm"].get<double>(), want_steps[i]["grad_norm"].get<double>()) << replicas;
    }
    for (size_t i = 0; i < evals.size(); ++i) {
      EXPECT_EQ(evals[i]["val_loss"].get<double>(), want_evals[i]["val_loss"].get<double>()) << replicas;
    }
  }
  // Over Gloo's world and groups instead of the two rings: the same bits.
  std::vector<std::string> gloo = flags;
  gloo.insert(gloo.end(), {"--elastic-comm", "gloo"});
  EXPECT_EQ(Checksum(Launch(4, gloo), 10), want) << "Gloo computed other parameters than the rings";
  // The same job as a fixed pipeline of 3 replicas: the same math up to
  // the float rounding of its micro-batch sums.
  flags.erase(flags.begin() + 4, flags.begin() + 6);
  auto fixed = Launch(6, flags);
  Checksum(fixed, 10);
  auto steps = testing::Events(fixed[0], "step");
  ASSERT_EQ(steps.size(), 10u) << fixed[0].out;
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_NEAR(steps[i]["loss"].get<double>(), want_steps[i]["loss"].get<double>(), 1e-4) << "step " << i + 1;
  }
}

// Against plain data parallelism at full width: the same math up to the
// rounding of the fixed-point sum, which is finer than a float's.
TEST_F(Trainer, ElasticAtFullWidthFollowsPlainDataParallelism) {
  auto plain = Launch(2, {"--steps", "10", "--batch-size", "4", "--precision", "fp32"});
  auto elastic = Launch(2, {"--steps", "10", "--batch-size", "4", "--precision", "fp32", "--elastic-replicas", "2"});
  Checksum(plain, 10);
  Checksum(elastic, 10);
  auto a = testing::Events(plain[0], "step"), b = testing::Events(elastic[0], "step");
  ASSERT_EQ(a.size(), 10u);
  ASSERT_EQ(b.size(), 10u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(b[i]["loss"].get<double>(), a[i]["loss"].get<double>(), 1e-4) << "step " << i + 1;
    EXPECT_NEAR(b[i]["grad_norm"].get<double>() / a[i]["grad_norm"].get<double>(), 1.0, 1e-3) << "step " << i + 1;
  }
}

TEST_F(Trainer, ElasticShapesThatCannotWorkAreOneLineErrors) {
  testing::ExpectUsageError(testing::Run(Args({"--elastic-replicas", "-1"})), "--elastic-replicas must be in [0, 1048576]");
  testing::ExpectUsageError(testing::Run(Args({"--elastic-replicas", "2", "--pp", "2", "--shard-optimizer"})),
                            "drop --shard-optimizer or --pp");
  auto wide = Launch(3, {"--steps", "2", "--elastic-replicas", "2"});
  EXPECT_NE(wide[0].exit_code, 0);
  EXPECT_NE(wide[0].err.find("WORLD_SIZE 3 exceeds --elastic-replicas 2"), std::string::npos) << wide[0].err;
  auto pipes = Launch(6, {"--steps", "2", "--elastic-replicas", "2", "--pp", "2"});
  EXPECT_NE(pipes[0].exit_code, 0);
  EXPECT_NE(pipes[0].err.find("holds 3 pipelines of --pp 2, more than --elastic-replicas 2"), std::string::npos)
      << pipes[0].err;
}

// ---------------------------------------------------------------- pipeline parallel

// DP 2 x PP 2 (4 ranks, 2 micro-batches each) against DP 2 x PP 1 on the same
// global batch: the same loss at every step up to float summation order.
TEST_F(Trainer, TwoStagesOfTwoReplicasFollowTheDataParallelLossCurve) {
  auto pp = Launch(4, {"--steps", "12", "--batch-size", "4", "--pp", "2", "--micro-batches", "2", "--precision",
                       "fp32"});
  auto dp = Launch(2, {"--steps", "12", "--batch-size", "4", "--precision", "fp32"});
  Checksum(pp, 12);  // all four ranks agree on the pipeline's checksum
  Checksum(dp, 12);
  auto a = StepLosses(pp[0]), b = StepLosses(dp[0]);
  ASSERT_EQ(a.size(), 12u) << pp[0].out;
  ASSERT_EQ(b.size(), 12u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-3) << "step " << i + 1;
  EXPECT_NE(pp[0].out.find("stage 0: embedding + block 0 | stage 1: block 1 + norm + head"), std::string::npos)
      << pp[0].out;
}

// The SDC test hook in the pipeline trainer (sdc.h): BULWARK_SDC=drift
// perturbs one gradient element per step, silently; the run completes and
// prints nothing different, only its parameters differ from a clean run's
// (which is deterministic: ExactResume).
TEST_F(Trainer, PipelineStagesTakeTheSdcHookSilently) {
  const std::vector<std::string> args = {"--steps", "3", "--batch-size", "4", "--pp", "2", "--micro-batches", "2",
                                         "--precision", "fp32"};
  auto run = [&](const std::map<std::string, std::string>& env) {
    std::vector<ProcessResult> out;
    for (auto& p : testing::StartRanks(Args(args), 2, env)) out.push_back(p->Wait());
    EXPECT_EQ(out.size(), 2u);
    return out;
  };
  const std::string clean = Checksum(run({}), 3);
  auto drift = run({{"BULWARK_SDC", "drift"}});
  EXPECT_NE(Checksum(drift, 3), clean) << "the corruption changed nothing";
  EXPECT_EQ(drift[0].err.find("sdc"), std::string::npos) << "silent: " << drift[0].err;
}

TEST_F(Trainer, DeadStagePeerEndsTheRankWithPeerLostExitCode) {
  auto ranks = testing::StartRanks(
      Args({"--steps", "100000", "--dist-timeout", "20", "--pp", "2", "--micro-batches", "2"}), 2);
  ASSERT_EQ(ranks.size(), 2u) << ranks[0]->Wait().err;
  testing::Process& r0 = *ranks[0];
  testing::Process& r1 = *ranks[1];
  ASSERT_TRUE(r0.WaitForOutput("\"event\":\"step\"", 120)) << r0.OutputSoFar();
  ::kill(r1.pid(), SIGKILL);
  auto t0 = std::chrono::steady_clock::now();
  auto res = r0.Wait(30);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(res.exit_code, 3) << res.err;
  EXPECT_NE(res.err.find("a peer died"), std::string::npos) << res.err;
  EXPECT_LT(took, 20.0);
  r1.Wait(5);
}

TEST_F(Trainer, PipelineShapesThatCannotWorkAreOneLineErrors) {
  auto one_line = [](const ProcessResult& r, const std::string& want) {
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
    auto b = r.err.find_first_not_of('\n'), e = r.err.find_last_not_of('\n');
    EXPECT_EQ(r.err.substr(b, e - b + 1).find('\n'), std::string::npos) << r.err;
  };
  one_line(testing::Run(Args({"--pp", "3"})), "--pp 3 exceeds the 2 layers (--n-layers)");
  one_line(testing::Run(Args({"--micro-batches", "3"})), "--micro-batches 3 does not divide --batch-size 8");
  std::map<std::string, std::string> env{{"RANK", "0"}, {"WORLD_SIZE", "3"}, {"MASTER_ADDR", "127.0.0.1"},
                                         {"MASTER_PORT", "0"}};  // refused before any rendezvous
  one_line(testing::Run(Args({"--pp", "2"}), env), "WORLD_SIZE 3 is not divisible by --pp 2");
}

// ---------------------------------------------------------------- checkpoints and bad input

TEST_F(Trainer, CorruptNewestCheckpointIsSkippedAndResumeStaysExact) {
  std::string straight = Checksum(Launch(1, {"--steps", "20", "--ckpt-dir", dir_ + "/a", "--ckpt-every", "5"}), 20);
  Checksum(Launch(1, {"--steps", "20", "--ckpt-dir", dir_ + "/b", "--ckpt-every", "5", "--stop-at", "15"}), 15);
  std::string shard = dir_ + "/b/" + trainer::StepDirName(15) + "/rank-0.bin";
  std::string bytes = *ReadFile(shard);
  bytes[bytes.size() / 2] ^= 0x01;
  ASSERT_TRUE(WriteFileAtomic(shard, bytes).ok());
  auto r = Launch(1, {"--steps", "20", "--ckpt-dir", dir_ + "/b", "--ckpt-every", "5", "--resume"});
  EXPECT_EQ(Checksum(r, 20), straight);
  EXPECT_NE(r[0].out.find("step-00000015 skipped: "), std::string::npos) << r[0].out;
  EXPECT_NE(r[0].out.find("checksum mismatch"), std::string::npos);
  EXPECT_NE(r[0].out.find("resumed from " + dir_ + "/b at step 10"), std::string::npos);
  EXPECT_EQ(StartStep(r[0]), 10);
}

// Checkpoints exist but none verifies: starting over would silently lose
// every trained step, so --resume refuses, naming each checkpoint and why.
TEST_F(Trainer, ResumeRefusesToStartOverWhenEveryCheckpointIsRejected) {
  const std::string ckpt = dir_ + "/c";
  std::string straight = Checksum(Launch(1, {"--steps", "10", "--ckpt-dir", ckpt, "--ckpt-every", "5"}), 10);
  for (int step : {5, 10}) {
    std::string shard = ckpt + "/" + trainer::StepDirName(step) + "/rank-0.bin";
    std::string bytes = *ReadFile(shard);
    bytes[bytes.size() / 2] ^= 0x01;
    ASSERT_TRUE(WriteFileAtomic(shard, bytes).ok());
  }
  // An interrupted save beside them is no checkpoint and is not listed.
  ASSERT_TRUE(MakeDirs(ckpt + "/" + trainer::StepDirName(15)).ok());
  auto refused = testing::Run(Args({"--steps", "10", "--ckpt-dir", ckpt, "--ckpt-every", "5", "--resume"}));
  testing::ExpectUsageError(refused, "--resume found no valid checkpoint in " + ckpt);
  for (const char* want : {"step-00000010 (", "step-00000005 (", "checksum mismatch", "--allow-fresh-start"})
    EXPECT_NE(refused.err.find(want), std::string::npos) << want << " missing from: " << refused.err;
  EXPECT_EQ(refused.err.find("step-00000015 ("), std::string::npos) << refused.err;
  EXPECT_TRUE(testing::Events(refused, "step").empty()) << "it trained: " << refused.out;

  // The pipeline loop refuses the same way, on every rank.
  auto pp = Launch(2, {"--steps", "10", "--ckpt-dir", ckpt, "--resume", "--pp", "2", "--micro-batches", "2"});
  for (const ProcessResult& r : pp) {
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("error: --resume found no valid checkpoint"), std::string::npos) << r.err;
  }

  // Asked to, it starts over (and lands on the straight run's state).
  auto fresh = Launch(1, {"--steps", "10", "--ckpt-dir", ckpt, "--ckpt-every", "5", "--resume", "--allow-fresh-start"});
  EXPECT_EQ(Checksum(fresh, 10), straight);
  EXPECT_EQ(StartStep(fresh[0]), 0);
  EXPECT_NE(fresh[0].out.find("starting from step 0"), std::string::npos) << fresh[0].out;
}

TEST_F(Trainer, ResumeWithNoCheckpointYetStartsFresh) {
  ASSERT_TRUE(MakeDirs(dir_ + "/empty").ok());
  auto r = Launch(1, {"--steps", "3", "--ckpt-dir", dir_ + "/empty", "--resume"});
  Checksum(r, 3);
  EXPECT_EQ(StartStep(r[0]), 0);
}

// One line on stderr naming the problem, a usage exit code, no files left.

TEST_F(Trainer, UnknownFlagIsOneLineError) {
  auto r = testing::Run(Args({"--learning-rate", "1", "--ckpt-dir", dir_ + "/c", "--ckpt-every", "1"}));
  testing::ExpectUsageError(r, "unknown flag '--learning-rate'");
  EXPECT_FALSE(PathExists(dir_ + "/c"));
}

TEST_F(Trainer, MissingDataSaysHowToPrepare) {
  auto r = testing::Run({testing::BinDir() + "/bulwark-train", "--config", "tiny", "--data", dir_ + "/none"});
  testing::ExpectUsageError(r, "bulwark-train prepare --corpus kjv --out " + dir_ + "/none");
}

TEST_F(Trainer, MissingCorpusLeavesNoOutput) {
  auto r = testing::Run({testing::BinDir() + "/bulwark-train", "prepare", "--corpus", dir_ + "/nope.txt", "--out",
                         dir_ + "/out"});
  testing::ExpectUsageError(r, "nope.txt");
  EXPECT_TRUE(ListDir(dir_).empty());
}

TEST_F(Trainer, CheckpointOfAnotherShapeIsRefused) {
  Checksum(Launch(1, {"--steps", "2", "--ckpt-dir", dir_ + "/c", "--ckpt-every", "2"}), 2);
  auto r = testing::Run(Args({"--steps", "4", "--d-model", "32", "--ckpt-dir", dir_ + "/c", "--resume"}));
  testing::ExpectUsageError(r, "has model shape");
  EXPECT_NE(r.err.find("d_model=64"), std::string::npos);
}

TEST_F(Trainer, IncompleteDistributedEnvironmentIsRefused) {
  testing::Process p(Args({"--steps", "2"}), {{"RANK", "0"}, {"WORLD_SIZE", "2"}});
  testing::ExpectUsageError(p.Wait(), "MASTER_ADDR, MASTER_PORT not set");
}

}  // namespace
}  // namespace bulwark
