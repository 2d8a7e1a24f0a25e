// RecordFile: the one container format for everything bulwark stores
// (checkpoint shards, token shards), on disk or in memory.
//
// Layout (little-endian):
//   header (48 bytes): magic "BLWKREC\0" | u32 version | u32 section count |
//                      u64 payload bytes | u64 payload checksum |
//                      char kind[8] | u64 header checksum (Checksum64)
//   version 2 checksums the payload with XXH3, version 1 with Checksum64;
//   writers write 2, readers take both.
//   payload: per section, u32 name length | name | u64 data length | data
//
// A reader checks the magic, the header checksum, the payload length against
// the bytes present (a torn write is shorter) and the payload checksum before
// it hands out a single byte, so a corrupt record is reported, never used.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "common/status.h"

namespace bulwark {

class RecordWriter {
 public:
  // `kind` (at most 8 chars) says what the record holds, e.g. "ckpt", "tokens".
  explicit RecordWriter(std::string kind);
  void Add(const std::string& name, const void* data, size_t n);
  void Add(const std::string& name, const std::string& data) { Add(name, data.data(), data.size()); }
  // The finished record, header first.
  std::string Serialize() const;
  Status WriteAtomic(const std::string& path) const;

 private:
  std::string kind_;
  std::string payload_;
  uint32_t sections_ = 0;
};

class RecordReader {
 public:
  // Verifies `bytes` fully; `where` names the source in error messages.
  static Result<RecordReader> Parse(std::string bytes, const std::string& kind, const std::string& where);
  static Result<RecordReader> Open(const std::string& path, const std::string& kind);

  bool Has(const std::string& name) const { return sections_.count(name) > 0; }
  // The section's bytes; they live as long as this reader.
  Result<std::string_view> Get(const std::string& name) const;
  const std::string& where() const { return where_; }

 private:
  std::string bytes_;
  std::string where_;
  std::map<std::string, std::pair<size_t, size_t>> sections_;  // offset, length: survive moves
};

}  // namespace bulwark
