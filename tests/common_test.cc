#include <gtest/gtest.h>

#include <fstream>

#include "common/checksum.h"
#include "common/files.h"
#include "common/record_file.h"
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
  RemoveTree(dir);
}

}  // namespace
}  // namespace bulwark
