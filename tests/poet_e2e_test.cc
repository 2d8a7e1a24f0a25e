// bulwark-train --optimizer poet end to end: resume across merges, data
// parallel agreement, the spectrum after many merges, bad POET settings.
#include <gtest/gtest.h>

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

TEST_F(Poet, ExactResumeAcrossAMerge) {
  // Checkpoint at 8, stop at 13: the resumed run replays the merge at 10.
  auto args = With({"--steps", "24", "--ckpt-every", "8"});
  std::string straight = Checksum(Launch(1, Plus(args, {"--ckpt-dir", dir_ + "/a"})), 24);
  Checksum(Launch(1, Plus(args, {"--ckpt-dir", dir_ + "/b", "--stop-at", "13"})), 13);
  EXPECT_EQ(Checksum(Launch(1, Plus(args, {"--ckpt-dir", dir_ + "/b", "--resume"})), 24), straight);
}

TEST_F(Poet, TwoShardedRanksAgreeAndResumeExactlyAcrossAMerge) {
  auto args = With({"--poet-variant", "fs", "--steps", "24", "--ckpt-every", "8", "--batch-size", "4",
                    "--shard-optimizer"});
  // Checksum() also checks that both ranks hold bitwise-equal parameters:
  // they drew the same index sets at every merge without talking.
  std::string straight = Checksum(Launch(2, Plus(args, {"--ckpt-dir", dir_ + "/a"})), 24);
  Checksum(Launch(2, Plus(args, {"--ckpt-dir", dir_ + "/b", "--stop-at", "15"})), 15);
  EXPECT_EQ(Checksum(Launch(2, Plus(args, {"--ckpt-dir", dir_ + "/b", "--resume"})), 24), straight);
}

TEST_F(Poet, SpectrumStaysW0sThroughHundredsOfStepsAndManyMerges) {
  // 300 steps, a merge every 25: 12 merges. Singular values of every
  // reparameterized weight must stay within 1e-3 of W0's (relative to the
  // largest); the measured drift is ~1e-5, float rounding of 12 merges.
  auto r = testing::Run(Args(With({"--steps", "300", "--poet-merge-every", "25", "--poet-diag-every", "300",
                                   "--poet-variant", "bs"})));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto diag = Events(r, "poet_diag");
  ASSERT_EQ(diag.size(), 1u);
  EXPECT_LT(diag[0]["max_spectrum_drift"].get<double>(), 1e-3) << diag[0].dump();
  EXPECT_EQ(diag[0]["layers"].size(), 14u);
  auto done = Events(r, "done");
  auto steps = Events(r, "step");
  ASSERT_FALSE(steps.empty());
  EXPECT_LT(done[0]["loss"].get<double>(), steps.front()["loss"].get<double>() - 0.5) << "POET must still learn";
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
