// A fast 64-bit checksum for checkpoints, shards and parameter fingerprints.
//
// Not cryptographic: it detects torn writes and bit rot, not tampering. It is
// stable across runs and machines (little-endian x86_64 and aarch64), so a
// checksum printed by one process can be compared with another's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace bulwark {

// Streaming form: Update() in any split of the same bytes gives the same
// Digest() as one call over all of them.
class Checksum {
 public:
  void Update(const void* data, size_t n);
  uint64_t Digest() const;
  std::string HexDigest() const;  // 16 lowercase hex digits

 private:
  uint64_t lanes_[4] = {0x9E3779B97F4A7C15ull, 0xC2B2AE3D27D4EB4Full,
                        0x165667B19E3779F9ull, 0x27D4EB2F165667C5ull};
  unsigned char tail_[32];
  size_t tail_len_ = 0;
  uint64_t total_ = 0;
};

uint64_t Checksum64(const void* data, size_t n);
// CRC-32 as zlib's crc32() and Python's zlib.crc32 compute it (reflected,
// polynomial 0xEDB88320): the payload checksum of shards the Python client
// writes. Table-driven, a few hundred MB/s: only read, never on a hot path.
uint32_t Crc32(const void* data, size_t n);
std::string Hex64(uint64_t v);

}  // namespace bulwark
