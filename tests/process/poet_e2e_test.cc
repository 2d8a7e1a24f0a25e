// bulwark-train --optimizer poet end to end: resume across merges, data
// parallel agreement, the spectrum after many merges, bad POET settings.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "support/trainer_fixture.h"

namespace bulwark {
namespace {

using testing::Events;
using testing::Trainer;

class Poet : public Trainer {
 protected:
  std::vector<std::string> With(std::vector<std::string> more) {
    return Plus({"--optimizer", "poet", "--poet-block-size", "16", "--poet-merge-every", "10"}, more);
  }
  static std::vector<std::string> Plus(std::vector<std::string> a, const std::vector<std::string>& more) {
    a.insert(a.end(), more.begin(), more.end());
    return a;
  }
};

// Every resume also checks the step it resumed from: a run that silently
// started over would end on the same checksum.
TEST_F(Poet, ExactResumeAcrossAMergeAndFromAfterOne) {
  auto args = With({"--steps", "24", "--ckpt-every", "8"});
  std::string straight = Checksum(Launch(1, Plus(args, {"--ckpt-dir", dir_ + "/a"})), 24);
  // Checkpoint at 8, stop at 13: the resumed run replays the merge at 10.
  Checksum(Launch(1, Plus(args, {"--ckpt-dir", dir_ + "/b", "--stop-at", "13"})), 13);
  auto before = Launch(1, Plus(args, {"--ckpt-dir", dir_ + "/b", "--resume"}));
  EXPECT_EQ(StartStep(before[0]), 8);
  EXPECT_EQ(Checksum(before, 24), straight);
  // Checkpoint at 12, after the merge at 10: the resumed run starts from the
  // merged W0, the permutations drawn at that merge and the initial spectrum,
  // all restored from the checkpoint's buffers, and merges again at 20.
  auto after_args = With({"--steps", "24", "--ckpt-every", "12"});
  Checksum(Launch(1, Plus(after_args, {"--ckpt-dir", dir_ + "/c", "--stop-at", "15"})), 15);
  auto after = Launch(1, Plus(after_args, {"--ckpt-dir", dir_ + "/c", "--resume"}));
  EXPECT_EQ(StartStep(after[0]), 12);
  EXPECT_EQ(Checksum(after, 24), straight);
}

TEST_F(Poet, TwoShardedRanksAgreeAndResumeExactlyAcrossAMerge) {
  auto args = With({"--poet-variant", "fs", "--steps", "24", "--ckpt-every", "8", "--batch-size", "4",
                    "--shard-optimizer"});
  // Checksum() also checks that both ranks hold bitwise-equal parameters:
  // they drew the same index sets at every merge without talking.
  std::string straight = Checksum(Launch(2, Plus(args, {"--ckpt-dir", dir_ + "/a"})), 24);
  Checksum(Launch(2, Plus(args, {"--ckpt-dir", dir_ + "/b", "--stop-at", "15"})), 15);
  auto resumed = Launch(2, Plus(args, {"--ckpt-dir", dir_ + "/b", "--resume"}));
  EXPECT_EQ(StartStep(resumed[0]), 8);
  EXPECT_EQ(Checksum(resumed, 24), straight);
}

// What a checkpoint holds for POET: each rotation's parameters Q (keyed
// "LAYER.q_out", "LAYER.q_in") and each layer's W0 buffer (keyed "LAYER").
struct PoetState {
  std::map<std::string, std::vector<float>> q;
  std::map<std::string, std::string> w0;
};
PoetState ReadPoetState(const std::string& ckpt, int64_t step) {
  PoetState out;
  auto rec = RecordReader::Open(ckpt + "/" + trainer::StepDirName(step) + "/rank-0.bin", "ckpt");
  EXPECT_TRUE(rec.ok()) << rec.status().ToString();
  if (!rec.ok()) return out;
  auto meta = nlohmann::json::parse(*rec->Get("meta"));
  const std::string_view params = *rec->Get("params");
  const float* p = reinterpret_cast<const float*>(params.data());
  for (const auto& e : meta["layout"]) {
    const std::string name = e["name"];
    for (const std::string side : {".q_out", ".q_in"}) {
      if (name.size() <= side.size() || name.compare(name.size() - side.size(), side.size(), side) != 0) continue;
      const std::string layer = name.substr(0, name.size() - side.size());
      int64_t n = 1;
      for (int64_t d : e["shape"]) n *= d;
      const int64_t off = e["offset"];
      out.q[name] = std::vector<float>(p + off, p + off + n);
      out.w0[layer] = std::string(*rec->Get("buffer:" + layer + ".w0"));
    }
  }
  return out;
}

double MaxAbs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::fabs(x)));
  return m;
}

// The orthogonal factors must actually learn: just before a merge every
// layer's R and P have moved away from the identity (Q != 0, and R - I is
// about 2Q); the merge folds them into W0 (changed) and restarts them at the
// identity (Q == 0). Measured: the smallest max |Q| of any rotation at
// step 9 is 0.015.
TEST_F(Poet, RotationsTrainAndMergeIntoW0) {
  Checksum(Launch(1, With({"--steps", "10", "--ckpt-every", "1", "--ckpt-dir", dir_ + "/c"})), 10);
  PoetState before = ReadPoetState(dir_ + "/c", 9), merged = ReadPoetState(dir_ + "/c", 10);
  ASSERT_EQ(before.w0.size(), 14u);  // 2 blocks x (4 attention + 3 MLP) linears
  ASSERT_EQ(before.q.size(), 28u);
  double smallest = 1;
  for (const auto& [name, q] : before.q) {
    smallest = std::min(smallest, MaxAbs(q));
    EXPECT_GT(MaxAbs(q), 1e-3) << name << ": this rotation is still the identity after 9 steps";
    EXPECT_EQ(MaxAbs(merged.q[name]), 0.0) << name << ": not reset by the merge";
  }
  std::printf("[ poet   ] smallest max |Q| of a rotation before the merge: %g\n", smallest);
  for (const auto& [layer, w0] : before.w0) EXPECT_NE(merged.w0[layer], w0) << layer << ": the merge left W0 unchanged";
}

TEST_F(Poet, BlockSizeThatDoesNotDivideALayerIsRefused) {
  auto r = testing::Run(Args({"--optimizer", "poet", "--poet-block-size", "48", "--steps", "2"}));
  testing::ExpectUsageError(r, "--poet-block-size 48 does not divide the width 64 of layer blocks.*.attn.wq input");
}

TEST_F(Poet, BadFractionAndNeumannTermsAreRefused) {
  testing::ExpectUsageError(testing::Run(Args({"--optimizer", "poet", "--poet-variant", "fs", "--poet-fs-fraction",
                                               "1.5"})),
                            "--poet-fs-fraction must lie in (0, 1]");
  testing::ExpectUsageError(testing::Run(Args({"--optimizer", "poet", "--poet-neumann-terms", "0"})),
                            "--poet-neumann-terms must be at least 1");
}

}  // namespace
}  // namespace bulwark
