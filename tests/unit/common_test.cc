#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "common/checksum.h"
#include "common/files.h"
#include "common/record_file.h"
#include "common/spike_rule.h"
#include "common/token.h"
#include "support/process.h"

namespace bulwark {
namespace {

TEST(Checksum, StreamingEqualsOneShotForEverySplit) {
  std::string data;
  for (int i = 0; i < 300; ++i) data.push_back(static_cast<char>(i * 7 + 3));
  uint64_t whole = Checksum64(data.data(), data.size());
  for (size_t split = 0; split <= data.size(); split += 13) {
    Checksum c;
    c.Update(data.data(), split);
    c.Update(data.data() + split, data.size() - split);
    EXPECT_EQ(c.Digest(), whole) << "split at " << split;
  }
}

TEST(Checksum, DetectsSingleBitFlipsAndLengthChanges) {
  std::string data(1000, 'x');
  uint64_t base = Checksum64(data.data(), data.size());
  for (size_t i = 0; i < data.size(); i += 97) {
    std::string d = data;
    d[i] ^= 1;
    EXPECT_NE(Checksum64(d.data(), d.size()), base);
  }
  EXPECT_NE(Checksum64(data.data(), data.size() - 1), base);
  EXPECT_EQ(Hex64(0xabcULL), "0000000000000abc");
}

TEST(Xxh3Checksum, StreamingEqualsOneShotAndMatchesTheSpec) {
  // XXH3-64 of no bytes with seed 0, from xxHash's own test vectors: pins the
  // variant (64-bit, unseeded), which files on disk depend on.
  EXPECT_EQ(Xxh3Checksum64("", 0), 0x2D06800538D394C2ull);
  std::string data;
  for (int i = 0; i < 5000; ++i) data.push_back(static_cast<char>(i * 31 + 7));
  const uint64_t whole = Xxh3Checksum64(data.data(), data.size());
  EXPECT_NE(whole, Checksum64(data.data(), data.size()));
  for (size_t split = 0; split <= data.size(); split += 397) {
    Xxh3Checksum c;
    c.Update(data.data(), split);
    c.Update(data.data() + split, data.size() - split);
    EXPECT_EQ(c.Digest(), whole) << "split at " << split;
  }
  std::string flipped = data;
  flipped[2500] ^= 1;
  EXPECT_NE(Xxh3Checksum64(flipped.data(), flipped.size()), whole);
}

// A record as a build before XXH3 wrote it: version 1, payload Checksum64.
std::string AsVersion1(std::string bytes) {
  const uint32_t v1 = 1;
  std::memcpy(&bytes[8], &v1, 4);
  const uint64_t payload = Checksum64(bytes.data() + 48, bytes.size() - 48);
  std::memcpy(&bytes[24], &payload, 8);
  const uint64_t header = Checksum64(bytes.data(), 40);
  std::memcpy(&bytes[40], &header, 8);
  return bytes;
}

TEST(RecordFile, ReadsVersion1RecordsWrittenBeforeXxh3) {
  RecordWriter w("ckpt");
  w.Add("params", std::string(3000, 'w'));
  std::string v2 = w.Serialize();
  uint32_t version = 0;
  std::memcpy(&version, &v2[8], 4);
  EXPECT_EQ(version, 2u);
  auto r = RecordReader::Parse(AsVersion1(v2), "ckpt", "old checkpoint");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->Get("params")->size(), 3000u);

  // The version picks the checksum: a v2 payload checksum under version 1 fails.
  std::string relabelled = v2;
  const uint32_t v1 = 1;
  std::memcpy(&relabelled[8], &v1, 4);
  const uint64_t header = Checksum64(relabelled.data(), 40);
  std::memcpy(&relabelled[40], &header, 8);
  auto bad = RecordReader::Parse(relabelled, "ckpt", "relabelled");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("payload checksum mismatch"), std::string::npos);
}

TEST(RecordFile, RoundTripsSections) {
  RecordWriter w("test");
  w.Add("a", std::string("hello"));
  w.Add("empty", std::string());
  auto r = RecordReader::Parse(w.Serialize(), "test", "mem");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r->Get("a"), "hello");
  EXPECT_EQ(r->Get("empty")->size(), 0u);
  EXPECT_FALSE(r->Get("missing").ok());
}

TEST(RecordFile, RejectsEveryTruncationAndBitFlip) {
  RecordWriter w("test");
  w.Add("payload", std::string(200, 'p'));
  std::string bytes = w.Serialize();
  for (size_t n = 0; n < bytes.size(); n += 7) {
    auto r = RecordReader::Parse(bytes.substr(0, n), "test", "torn");
    EXPECT_FALSE(r.ok()) << "truncated to " << n;
    EXPECT_EQ(r.status().code(), Status::Code::kCorrupt);
  }
  for (size_t i = 0; i < bytes.size(); i += 5) {
    std::string b = bytes;
    b[i] ^= 0x10;
    EXPECT_FALSE(RecordReader::Parse(b, "test", "flip").ok()) << "flip at " << i;
  }
}

TEST(RecordFile, RejectsAnotherKind) {
  RecordWriter w("tokens");
  auto r = RecordReader::Parse(w.Serialize(), "ckpt", "x");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("expected 'ckpt'"), std::string::npos);
}

TEST(Files, AtomicWriteReplacesWholeAndLeavesNoTemporaries) {
  std::string dir = testing::MakeTempDir();
  std::string path = JoinPath(dir, "f");
  ASSERT_TRUE(WriteFileAtomic(path, std::string("old")).ok());
  ASSERT_TRUE(WriteFileAtomic(path, std::string("new content")).ok());
  EXPECT_EQ(*ReadFile(path), "new content");
  EXPECT_EQ(ListDir(dir), std::vector<std::string>{"f"});
  EXPECT_EQ(ReadFile(JoinPath(dir, "nope")).status().code(), Status::Code::kNotFound);
  EXPECT_FALSE(WriteFileAtomic(JoinPath(dir, "no/such/dir/f"), std::string("x")).ok());
  RemoveTree(dir).IgnoreError();  // a temporary directory: what is left, the OS clears
}

// --- the cluster token ------------------------------------------------------

TEST(Token, IsPrivateAndRefusedWhenOthersCanReadIt) {
  const std::string path = testing::MakeTempDir() + "/token";
  auto t = CreateToken(path);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->size(), 48u);
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto back = ReadToken(path);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, *t);
  ::chmod(path.c_str(), 0644);
  auto open = ReadToken(path);
  ASSERT_FALSE(open.ok());
  EXPECT_NE(open.status().message().find("chmod 600"), std::string::npos) << open.status().message();
  auto missing = ReadToken(path + ".none");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("bulwark up"), std::string::npos);
}

}  // namespace
// The rule the controller and the trainer's guard share: its text form
// round-trips and refuses what is not a rule; the history rolls, drops its
// newest value for a rewind, and judges only once min_history are known.
TEST(SpikeRule, TravelsAsTextAndJudgesAgainstTheRollingMedian) {
  const SpikeRule rule{4.5, 6, 3};
  auto back = SpikeRule::Decode(rule.Encode());
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->factor, 4.5);
  EXPECT_EQ(back->window, 6);
  EXPECT_EQ(back->min_history, 3);
  for (const char* bad : {"", "5", "5,50", "5,50,20,1", "1,50,20", "5,0,20", "5,50,0", "x,50,20", "5,50,20x"}) {
    EXPECT_FALSE(SpikeRule::Decode(bad).has_value()) << bad;
  }
  SpikeHistory h(rule.window);
  h.Add(1.0);
  h.Add(1.0);
  EXPECT_FALSE(h.Spike(100.0, rule)) << "2 values known, 3 needed";
  EXPECT_TRUE(h.Spike(std::nan(""), rule)) << "non-finite is always a spike";
  h.Add(2.0);
  EXPECT_TRUE(h.Spike(4.5 * 1.0 + 0.01, rule));  // median of {1, 1, 2} is 1
  EXPECT_FALSE(h.Spike(4.5 * 1.0, rule));
  for (int i = 0; i < 6; ++i) h.Add(10.0);  // the window keeps the last 6
  EXPECT_EQ(h.size(), 6);
  EXPECT_EQ(h.Median(), 10.0);
  h.PopBack();
  EXPECT_EQ(h.size(), 5);
  EXPECT_FALSE(h.Spike(45.0, rule));
  EXPECT_TRUE(h.Spike(45.1, rule));
}

}  // namespace bulwark
