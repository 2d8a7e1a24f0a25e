// Pipeline planning, the precision default and the device choice: pure
// functions, no libtorch.
#include <gtest/gtest.h>

#include <set>

#include "trainer/config.h"
#include "trainer/model/device.h"
#include "trainer/step/pipeline_plan.h"
#include "trainer/model/precision.h"

namespace bulwark::trainer {
namespace {

TEST(PipelinePlan, RanksOfOneStageAreConsecutiveAndPipelinesStrideByDp) {
  // WORLD_SIZE 6 = DP 3 x PP 2: ranks 0-2 are stage 0, 3-5 stage 1.
  std::set<std::pair<int, int>> seen;
  for (int r = 0; r < 6; ++r) {
    auto c = RankCoords(r, 6, 2);
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(c->dp_size, 3);
    EXPECT_EQ(c->pp_size, 2);
    EXPECT_EQ(c->pp, r / 3);
    EXPECT_EQ(c->dp, r % 3);
    EXPECT_EQ(RankOf(c->dp, c->pp, c->dp_size), r);
    seen.insert({c->dp, c->pp});
  }
  EXPECT_EQ(seen.size(), 6u);
}

TEST(PipelinePlan, PpThatDoesNotDivideTheWorldNamesTheFix) {
  auto c = RankCoords(0, 4, 3);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("WORLD_SIZE 4 is not divisible by --pp 3"), std::string::npos);
}

// Every rank refuses a world it cannot run at before any rendezvous.
TEST(PipelinePlan, AWorldWiderThanTheElasticReplicasIsRefusedNamingTheFix) {
  EXPECT_TRUE(CheckWorld(2, 1, 2).ok());
  EXPECT_TRUE(CheckWorld(8, 1, 0).ok()) << "not elastic: any width";
  EXPECT_TRUE(CheckWorld(4, 2, 2).ok()) << "two pipelines of two stages";
  EXPECT_EQ(CheckWorld(3, 1, 2).message(),
            "WORLD_SIZE 3 exceeds --elastic-replicas 2, the job's full width; raise --elastic-replicas");
  EXPECT_EQ(CheckWorld(6, 2, 2).message(),
            "WORLD_SIZE 6 holds 3 pipelines of --pp 2, more than --elastic-replicas 2; raise --elastic-replicas");
  EXPECT_NE(CheckWorld(5, 2, 0).message().find("is not divisible by --pp 2"), std::string::npos);
}

TEST(PipelinePlan, SplitIsBalancedAndCoversEveryLayerOnce) {
  for (int layers = 1; layers <= 9; ++layers)
    for (int stages = 1; stages <= layers; ++stages) {
      auto s = SplitLayers(layers, stages);
      ASSERT_EQ(static_cast<int>(s.size()), stages);
      int next = 0, lo = 1 << 30, hi = 0;
      for (auto& st : s) {
        EXPECT_EQ(st.first, next);
        next = st.last;
        lo = std::min(lo, st.last - st.first);
        hi = std::max(hi, st.last - st.first);
      }
      EXPECT_EQ(next, layers);
      EXPECT_LE(hi - lo, 1) << layers << " layers over " << stages;
      EXPECT_GE(lo, 1);
      EXPECT_TRUE(s.front().embed);
      EXPECT_TRUE(s.back().head);
      // The stage with the head never gets more blocks than the first.
      EXPECT_LE(s.back().last - s.back().first, s.front().last - s.front().first);
    }
  EXPECT_EQ(DescribeSplit(SplitLayers(4, 2)), "stage 0: embedding + blocks 0-1 | stage 1: blocks 2-3 + norm + head");
  EXPECT_EQ(DescribeSplit(SplitLayers(3, 3)),
            "stage 0: embedding + block 0 | stage 1: block 1 | stage 2: block 2 + norm + head");
}

TEST(PipelinePlan, OneFOneBOrdersEveryMicroBatchOnceAndBoundsLiveActivations) {
  for (int stages = 1; stages <= 4; ++stages)
    for (int m = 1; m <= 6; ++m)
      for (int s = 0; s < stages; ++s) {
        auto ops = OneFOneB(s, stages, m);
        ASSERT_EQ(static_cast<int>(ops.size()), 2 * m);
        int next_f = 0, next_b = 0, live = 0, most = 0;
        for (auto& op : ops) {
          if (op.kind == PipeOp::kForward) {
            EXPECT_EQ(op.micro, next_f++);
            most = std::max(most, ++live);
          } else {
            EXPECT_EQ(op.micro, next_b++);
            EXPECT_LT(op.micro, next_f) << "backward before its forward";
            --live;
          }
        }
        EXPECT_LE(most, std::min(m, stages - s));
      }
  // The last stage alternates from the start; the first warms up with S-1 forwards.
  EXPECT_EQ(OneFOneB(1, 2, 3), (std::vector<PipeOp>{{PipeOp::kForward, 0}, {PipeOp::kBackward, 0},
                                                    {PipeOp::kForward, 1}, {PipeOp::kBackward, 1},
                                                    {PipeOp::kForward, 2}, {PipeOp::kBackward, 2}}));
  EXPECT_EQ(OneFOneB(0, 2, 3), (std::vector<PipeOp>{{PipeOp::kForward, 0}, {PipeOp::kForward, 1},
                                                    {PipeOp::kBackward, 0}, {PipeOp::kForward, 2},
                                                    {PipeOp::kBackward, 1}, {PipeOp::kBackward, 2}}));
}

TEST(PipelinePlan, BubbleFraction) {
  EXPECT_DOUBLE_EQ(BubbleFraction(1, 4), 0.0);
  EXPECT_DOUBLE_EQ(BubbleFraction(2, 4), 0.2);
  EXPECT_DOUBLE_EQ(BubbleFraction(4, 1), 0.75);
}

TEST(PipelineConfig, BadShapesAreRefusedWithTheFix) {
  auto cfg = *Preset("tiny");
  cfg.model.vocab_size = 512;
  cfg.pp = 3;  // tiny has 2 layers
  auto s = cfg.Validate();
  EXPECT_NE(s.message().find("--pp 3 exceeds the 2 layers"), std::string::npos) << s.ToString();
  cfg.pp = 2;
  cfg.micro_batches = 3;  // batch 8
  s = cfg.Validate();
  EXPECT_NE(s.message().find("--micro-batches 3 does not divide --batch-size 8"), std::string::npos) << s.ToString();
  cfg.micro_batches = 4;
  EXPECT_TRUE(cfg.Validate().ok());
}

TEST(Precision, DefaultFollowsTheCpuFlags) {
  auto cpu = ParseCpuInfo("processor\t: 0\nflags\t\t: fpu sse avx512f avx512_bf16 avx2\n\nprocessor\t: 1\n");
  EXPECT_TRUE(cpu.avx512_bf16);
  EXPECT_FALSE(cpu.amx_bf16);
  EXPECT_TRUE(ChoosePrecision("auto", cpu)->bf16);
  EXPECT_TRUE(ChoosePrecision("auto", ParseCpuInfo("flags : amx_tile amx_bf16\n"))->bf16);
  auto none = ParseCpuInfo("flags\t\t: fpu sse avx512f avx2\n");
  EXPECT_FALSE(ChoosePrecision("auto", none)->bf16);
  EXPECT_NE(ChoosePrecision("auto", none)->reason.find("fp32 (auto"), std::string::npos);
  EXPECT_TRUE(ChoosePrecision("bf16", none)->bf16);  // asked for: honoured, if slow
  EXPECT_FALSE(ChoosePrecision("fp32", cpu)->bf16);
  EXPECT_FALSE(ChoosePrecision("fp16", cpu).ok());
}

// --device against every build and machine (train.cc passes the facts).
TEST(Device, AutoTakesCudaOnlyWhenBuiltWithItAndAGpuIsVisible) {
  auto cpu_build = ChooseDevice("auto", /*built_with_cuda=*/false, /*gpus=*/4);
  ASSERT_TRUE(cpu_build.ok());
  EXPECT_FALSE(cpu_build->cuda);
  EXPECT_EQ(cpu_build->reason, "cpu (auto: this build has no CUDA)");
  auto no_gpu = ChooseDevice("auto", true, 0);
  ASSERT_TRUE(no_gpu.ok());
  EXPECT_FALSE(no_gpu->cuda);
  EXPECT_NE(no_gpu->reason.find("no GPU visible"), std::string::npos);
  auto gpu = ChooseDevice("auto", true, 1);
  ASSERT_TRUE(gpu.ok());
  EXPECT_TRUE(gpu->cuda);
  EXPECT_EQ(gpu->reason, "cuda (auto: 1 GPU visible)");
  EXPECT_FALSE(ChooseDevice("cpu", true, 8)->cuda);
  EXPECT_TRUE(ChooseDevice("cuda", true, 2)->cuda);
  // This binary: Debian's libtorch has no CUDA, so CI builds without it.
  EXPECT_FALSE(BuiltWithCuda());
}

TEST(Device, CudaWithoutCudaIsOneLineNamingTheReason) {
  auto build = ChooseDevice("cuda", false, 0);
  ASSERT_FALSE(build.ok());
  EXPECT_EQ(build.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(build.status().message().find("built against a libtorch without CUDA"), std::string::npos);
  EXPECT_NE(build.status().message().find("scripts/gpu-build.sh"), std::string::npos);
  EXPECT_EQ(build.status().message().find('\n'), std::string::npos);
  auto machine = ChooseDevice("cuda", true, 0);
  ASSERT_FALSE(machine.ok());
  EXPECT_NE(machine.status().message().find("sees no GPU"), std::string::npos) << machine.status().message();
  auto bad = ChooseDevice("gpu", true, 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "--device 'gpu' is not one of: auto, cpu, cuda");
}

// --dist-backend: NCCL where each rank has a GPU of its own and the job is
// not elastic; auto says why not, nccl refuses in one line.
TEST(Device, NcclServesCudaRanksWithAGpuEachUnlessElastic) {
  NcclFacts f;
  f.built_with_nccl = true;
  f.cuda = true;
  f.world_size = 16;
  f.local_world_size = 8;
  f.gpus = 8;
  for (const char* asked : {"auto", "nccl"}) {
    auto yes = ChooseNccl(asked, f);
    ASSERT_TRUE(yes.ok()) << yes.status().message();
    EXPECT_TRUE(yes->nccl);
    EXPECT_NE(yes->reason.find("a GPU per rank, 8 on this machine's 8"), std::string::npos) << yes->reason;
  }
  EXPECT_FALSE(ChooseNccl("gloo", f)->nccl);

  // Each fact that rules NCCL out: auto falls back to Gloo and says why,
  // nccl is a one-line error naming the same reason.
  auto without = [&](auto change, const std::string& why) {
    NcclFacts g = f;
    change(g);
    auto fallback = ChooseNccl("auto", g);
    ASSERT_TRUE(fallback.ok());
    EXPECT_FALSE(fallback->nccl);
    EXPECT_NE(fallback->reason.find(why), std::string::npos) << fallback->reason;
    auto refused = ChooseNccl("nccl", g);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.status().message().find(why), std::string::npos) << refused.status().message();
    EXPECT_EQ(refused.status().message().find('\n'), std::string::npos);
  };
  without([](NcclFacts& g) { g.gpus = 4; }, "8 ranks share 4 GPUs on this machine");
  // One GPU visible to each of 8 ranks: shared, or each its own
  // (CUDA_VISIBLE_DEVICES per rank). auto cannot tell and keeps Gloo; the
  // user who knows asks for NCCL.
  f.gpus = 1;
  auto one = ChooseNccl("auto", f);
  ASSERT_TRUE(one.ok());
  EXPECT_FALSE(one->nccl);
  EXPECT_NE(one->reason.find("8 ranks share 1 GPU on this machine"), std::string::npos) << one->reason;
  EXPECT_NE(one->reason.find("say --dist-backend nccl"), std::string::npos) << one->reason;
  auto asked = ChooseNccl("nccl", f);
  ASSERT_TRUE(asked.ok()) << asked.status().message();
  EXPECT_TRUE(asked->nccl);
  EXPECT_NE(asked->reason.find("each of this machine's 8 ranks sees one GPU, taken as its own"), std::string::npos);
  f.gpus = 8;
  without([](NcclFacts& g) { g.built_with_nccl = false; }, "built without NCCL");
  without([](NcclFacts& g) { g.cuda = false; }, "trains on the CPU");
  without([](NcclFacts& g) { g.elastic = true; }, "elastic replicas reduce exactly over their ring");

  f.world_size = f.local_world_size = 1;
  EXPECT_FALSE(ChooseNccl("auto", f)->nccl);  // one rank: nothing to reduce
  EXPECT_EQ(ChooseNccl("mpi", f).status().message(), "--dist-backend 'mpi' is not one of: auto, gloo, nccl");
}

TEST(Device, ConfigKeyValidates) {
  auto c = ParseTrainArgs({"--device", "cpu"});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->device, "cpu");
  EXPECT_TRUE(c->Validate().ok());
  EXPECT_EQ(ParseTrainArgs({})->device, "auto");
  auto bad = ParseTrainArgs({"--device", "gpu"});
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(bad->Validate().message(), "--device 'gpu' is not one of: auto, cpu, cuda");
  EXPECT_EQ(ParseTrainArgs({})->dist_backend, "auto");
  EXPECT_EQ(ParseTrainArgs({"--dist-backend", "mpi"})->Validate().message(),
            "--dist-backend 'mpi' is not one of: auto, gloo, nccl");
  EXPECT_NE(ParseTrainArgs({"--dist-backend", "nccl", "--elastic-replicas", "2"})->Validate().message().find(
                "--dist-backend nccl: elastic replicas reduce exactly over their ring"),
            std::string::npos);
}

}  // namespace
}  // namespace bulwark::trainer
