// A fast 64-bit checksum for checkpoints, shards and parameter fingerprints.
//
// Not cryptographic: it detects torn writes and bit rot, not tampering. It is
// stable across runs and machines (little-endian x86_64 and aarch64), so a
// checksum printed by one process can be compared with another's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
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

// XXH3-64 (xxHash 0.8, seed 0, Debian's libxxhash): the payload checksum of
// shard images and records since it replaced Checksum64 there. It hashes
// about twice as fast per CPU second (bench/checksum, docs/checkpoints.md)
// because it uses SIMD lanes where Checksum64 is a scalar multiply chain.
// Checksum64 stays for headers, parameter fingerprints and reading older
// files. The digest of a byte string is the same on every machine, whichever
// instruction set the library picks at run time.
uint64_t Xxh3Checksum64(const void* data, size_t n);

// Streaming XXH3: Update() in any split gives Xxh3Checksum64 of the whole.
class Xxh3Checksum {
 public:
  Xxh3Checksum();
  ~Xxh3Checksum();
  Xxh3Checksum(Xxh3Checksum&&) noexcept;
  Xxh3Checksum& operator=(Xxh3Checksum&&) noexcept;
  void Update(const void* data, size_t n);
  uint64_t Digest() const;

 private:
  struct State;  // xxHash's state, kept out of this header
  std::unique_ptr<State> state_;
};
// CRC-32 as zlib's crc32() and Python's zlib.crc32 compute it (reflected,
// polynomial 0xEDB88320): the payload checksum of shards the Python client
// writes. Table-driven, a few hundred MB/s: only read, never on a hot path.
uint32_t Crc32(const void* data, size_t n);
std::string Hex64(uint64_t v);

}  // namespace bulwark
