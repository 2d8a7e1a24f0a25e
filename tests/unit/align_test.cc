// A GPU machine's verdict on its own GPUs' alignment hashes
// (trainer/diag/align.h), pure: all equal is the machine's hash; a GPU apart
// from a strict majority is named; a split names every GPU; and a machine
// whose GPUs disagree never reports a healthy machine's hash.
#include <gtest/gtest.h>

#include "trainer/diag/align.h"

namespace bulwark::trainer {
namespace {

TEST(AlignDevices, GpusThatAgreeGiveTheirHash) {
  EXPECT_EQ(JudgeDeviceHashes({0xabcull}).hash, 0xabcull);
  const DeviceHashes eight = JudgeDeviceHashes(std::vector<uint64_t>(8, 0x1234ull));
  EXPECT_EQ(eight.hash, 0x1234ull) << "a machine of 8 healthy GPUs compares equal to a machine of 1";
  EXPECT_EQ(eight.disagree, "");
  EXPECT_EQ(JudgeDeviceHashes({}).disagree, "");
}

TEST(AlignDevices, TheGpuApartFromTheMajorityIsNamed) {
  std::vector<uint64_t> h(8, 0x1234ull);
  h[3] = 0x99ull;
  const DeviceHashes d = JudgeDeviceHashes(h);
  EXPECT_NE(d.hash, 0x1234ull);
  EXPECT_NE(d.hash, 0x99ull);
  EXPECT_EQ(d.disagree, "GPU 3 computed 0000000000000099; the other 7 GPUs 0000000000001234");
  h[5] = 0x77ull;
  EXPECT_EQ(JudgeDeviceHashes(h).disagree,
            "GPU 3 computed 0000000000000099, GPU 5 computed 0000000000000077; the other 6 GPUs 0000000000001234");
}

TEST(AlignDevices, ASplitNamesEveryGpu) {
  const DeviceHashes d = JudgeDeviceHashes({0x1ull, 0x2ull});
  EXPECT_EQ(d.disagree, "no strict majority among the machine's 2 GPUs: GPU 0 0000000000000001, GPU 1 0000000000000002");
  EXPECT_NE(d.hash, 0x1ull);
  EXPECT_NE(d.hash, 0x2ull);
  EXPECT_NE(JudgeDeviceHashes({0x2ull, 0x1ull}).hash, d.hash) << "which GPU computed what is part of the digest";
}

}  // namespace
}  // namespace bulwark::trainer
