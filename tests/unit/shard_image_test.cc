// In-memory checkpoint shards as bytes, without a store: the image format
// (its checksum kinds, torn and corrupt images), shared-memory regions, and
// the restore point the ranks agree on. The stores that hold and move them
// are shard_test.cc's.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "common/checksum.h"
#include "rank_client/restore_point.h"
#include "rank_client/shard_image.h"
#include "rank_client/shard_region.h"

namespace bulwark {
namespace {

using rank_client::ShardRegion;

std::vector<rank_client::ShardSection> Sections(const std::vector<float>& params, const std::string& extra) {
  return {{"params", params.data(), params.size() * sizeof(float)}, {"extra", extra.data(), extra.size()}};
}

TEST(ShardImage, RoundTripsAndRejectsTornOrCorruptImages) {
  std::vector<float> params(10000);
  for (size_t i = 0; i < params.size(); ++i) params[i] = static_cast<float>(i) * 0.5f;
  auto sections = Sections(params, "hello");
  std::vector<uint8_t> slot(rank_client::ShardImageSize(sections, 10) + 100);
  ASSERT_TRUE(rank_client::WriteShardImage(slot.data(), slot.size(), {7, 1, 2}, "{\"step\":7}", sections).ok());

  auto v = rank_client::ReadShardImage(slot.data(), slot.size(), "test");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->info.step, 7);
  EXPECT_EQ(v->info.rank, 1);
  EXPECT_EQ(v->meta, "{\"step\":7}");
  ASSERT_EQ(v->sections["params"].second, params.size() * sizeof(float));
  EXPECT_EQ(std::memcmp(v->sections["params"].first, params.data(), params.size() * sizeof(float)), 0);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(v->sections["extra"].first), 5), "hello");

  // Too small a slot is refused before anything is written.
  EXPECT_FALSE(rank_client::WriteShardImage(slot.data(), 100, {8, 1, 2}, "{}", sections).ok());

  // One flipped bit: the header is intact, the payload checksum is not.
  std::vector<uint8_t> bad = slot;
  ASSERT_TRUE(rank_client::CorruptShardImage(bad.data(), bad.size()));
  EXPECT_TRUE(rank_client::PeekShardHeader(bad.data(), bad.size(), nullptr, nullptr));
  auto c = rank_client::ReadShardImage(bad.data(), bad.size(), "memory copy");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Status::Code::kCorrupt);
  EXPECT_NE(c.status().message().find("fails its checksum"), std::string::npos) << c.status().ToString();

  // A writer that died midway leaves the header unsealed.
  std::vector<uint8_t> torn = slot;
  std::memset(torn.data() + offsetof(rank_client::ShardHeader, header_checksum), 0, 8);
  EXPECT_FALSE(rank_client::PeekShardHeader(torn.data(), torn.size(), nullptr, nullptr));
  EXPECT_FALSE(rank_client::ReadShardImage(torn.data(), torn.size(), "torn").ok());
  // So does a truncated copy.
  EXPECT_FALSE(rank_client::ReadShardImage(slot.data(), v->image_bytes - 1, "short").ok());
}

// Rewrites a sealed image's payload checksum as `kind` computes it and
// reseals the header: an image as an older writer (kind 0) or the Python
// client (kind 1) would have left it.
void Reseal(std::vector<uint8_t>& image, uint32_t kind, uint64_t payload_checksum) {
  rank_client::ShardHeader h;
  std::memcpy(&h, image.data(), sizeof h);
  h.checksum_kind = kind;
  h.payload_checksum = payload_checksum;
  h.header_checksum = Checksum64(&h, offsetof(rank_client::ShardHeader, header_checksum));
  std::memcpy(image.data(), &h, sizeof h);
}

TEST(ShardImage, WritesXxh3AndStillVerifiesChecksum64AndCrc32Images) {
  std::vector<float> params(5000, 1.25f);
  auto sections = Sections(params, "kinds");
  std::vector<uint8_t> slot(rank_client::ShardImageSize(sections, 2));
  ASSERT_TRUE(rank_client::WriteShardImage(slot.data(), slot.size(), {3, 0, 1}, "{}", sections).ok());
  rank_client::ShardHeader h;
  std::memcpy(&h, slot.data(), sizeof h);
  const uint8_t* payload = slot.data() + sizeof h;
  EXPECT_EQ(h.checksum_kind, rank_client::kXxh3);
  EXPECT_EQ(h.payload_checksum, Xxh3Checksum64(payload, h.payload_bytes));

  // Images sealed before the switch (Checksum64) and by Python (CRC-32) read.
  std::vector<uint8_t> old = slot;
  Reseal(old, rank_client::kChecksum64, Checksum64(payload, h.payload_bytes));
  auto v = rank_client::ReadShardImage(old.data(), old.size(), "old image");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->info.step, 3);
  std::vector<uint8_t> py = slot;
  Reseal(py, rank_client::kCrc32, Crc32(payload, h.payload_bytes));
  EXPECT_TRUE(rank_client::ReadShardImage(py.data(), py.size(), "python image").ok());

  // The kind decides which checksum is checked: XXH3's value under kind 0 fails.
  std::vector<uint8_t> mixed = slot;
  Reseal(mixed, rank_client::kChecksum64, h.payload_checksum);
  auto m = rank_client::ReadShardImage(mixed.data(), mixed.size(), "mixed");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("fails its checksum"), std::string::npos) << m.status().ToString();

  // A kind this build does not know is refused by name, not misread.
  std::vector<uint8_t> future = slot;
  Reseal(future, 7, h.payload_checksum);
  auto f = rank_client::ReadShardImage(future.data(), future.size(), "future");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("unknown checksum kind 7"), std::string::npos) << f.status().ToString();
}

TEST(ShardRegion, IsSharedBetweenMappingsAndOrdersSealedSlots) {
  auto r = ShardRegion::Create("test", 1 << 16, 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto other = ShardRegion::Map(::dup(r->fd()));
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->num_slots(), 2);
  EXPECT_TRUE(other->SealedSlots().empty());
  std::vector<float> p(100, 1.0f);
  ASSERT_TRUE(rank_client::WriteShardImage(r->slot(1), r->slot_capacity(), {5, 0, 1}, "{}", Sections(p, "")).ok());
  ASSERT_TRUE(rank_client::WriteShardImage(r->slot(0), r->slot_capacity(), {6, 0, 1}, "{}", Sections(p, "")).ok());
  auto sealed = other->SealedSlots();  // written through one mapping, seen through the other
  ASSERT_EQ(sealed.size(), 2u);
  EXPECT_EQ(sealed[0].info.step, 6);
  EXPECT_EQ(sealed[1].info.step, 5);
  EXPECT_EQ(other->OldestSlot(0), 1);
  EXPECT_FALSE(ShardRegion::Map(::memfd_create("not-a-region", 0)).ok());
}

TEST(RestorePoint, NewestStepEveryRankHoldsOnOneTimeline) {
  using rank_client::ShardPoint;
  const uint64_t a = 0, b = rank_client::NextTimeline(a, 700);
  int64_t newest = -1;
  // Rank 0 finished step 704, rank 1 died copying it: 703 it is, one lost.
  auto p = rank_client::NewestCommonPoint({{{704, a}, {703, a}}, {{703, a}, {702, a}}}, &newest);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->step, 703);
  EXPECT_EQ(newest, 704);

  // Step 720 exists on both ranks, but rank 1's copy is from the timeline
  // abandoned by a restore to 700: the two must not be combined.
  newest = -1;
  p = rank_client::NewestCommonPoint({{{720, b}, {719, b}, {700, a}}, {{720, a}, {719, a}, {700, a}}}, &newest);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->step, 700);
  EXPECT_EQ(p->timeline, a);
  EXPECT_EQ(newest, 720);

  // Nothing in common: no restore from these copies.
  newest = -1;
  EXPECT_FALSE(rank_client::NewestCommonPoint({{{5, a}}, {{6, a}}}, &newest).has_value());
  EXPECT_EQ(newest, -1);
  EXPECT_FALSE(rank_client::NewestCommonPoint({}, &newest).has_value());
  // Deterministic, and distinct per restore point.
  EXPECT_EQ(rank_client::NextTimeline(a, 700), b);
  EXPECT_NE(rank_client::NextTimeline(a, 701), b);
  EXPECT_NE(rank_client::NextTimeline(b, 700), b);
}

}  // namespace
}  // namespace bulwark
