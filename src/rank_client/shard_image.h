// A shard image: one rank's training state at one step, self-describing and
// self-checking, laid out so that it is written in place into shared memory
// and then sent to a peer or persisted byte for byte, never re-encoded.
//
//   ShardHeader      magic, version, payload checksum kind, step, rank, world
//                    size, payload length and checksum, and a checksum of the
//                    header itself
//   payload          u64 meta length, meta (JSON, the writer's business),
//                    u64 section count, per section: u64 name length, name,
//                    u64 size; then the sections' bytes in that order
//
// The header checksum is written last: an image whose writer died midway
// (a killed rank, a torn transfer) fails it and is never taken for complete.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark::rank_client {

struct ShardHeader {
  char magic[8];
  uint32_t version;
  uint32_t checksum_kind;  // of the payload: kChecksum64, kCrc32 or kXxh3
  int64_t step;
  int32_t rank;
  int32_t world_size;
  uint64_t payload_bytes;
  uint64_t payload_checksum;
  uint64_t header_checksum;  // of the bytes above; 0 while being written
};
static_assert(sizeof(ShardHeader) == 56, "ShardHeader is part of the on-disk format");

// Payload checksums. The header's own checksum is always Checksum64 (48
// bytes: speed is moot, and every reader already computes it). bulwark-train
// writes XXH3 (kind 2), several times faster than Checksum64 on the copy it
// makes every step (bench/checksum); images written before the switch say
// kind 0 and still verify. The Python client (python/bulwark/shard.py)
// writes zlib's CRC-32 (kind 1), which Python computes in C at GB/s where
// Checksum64 in pure Python manages about 10 MB/s.
constexpr uint32_t kChecksum64 = 0;
constexpr uint32_t kCrc32 = 1;
constexpr uint32_t kXxh3 = 2;

struct ShardInfo {
  int64_t step = 0;
  int rank = 0;
  int world_size = 1;
};

// A section to write: `size` bytes at `data`, which must stay unchanged until
// the write returns.
struct ShardSection {
  std::string name;
  const void* data = nullptr;
  size_t size = 0;
};

// Bytes an image of these sections needs with a meta of `meta_bytes`.
size_t ShardImageSize(const std::vector<ShardSection>& sections, size_t meta_bytes);

// Writes a complete image into `dst` (`capacity` bytes): invalidates the old
// header first, copies and checksums in one pass, and seals the header last.
Status WriteShardImage(void* dst, size_t capacity, const ShardInfo& info, const std::string& meta,
                       const std::vector<ShardSection>& sections);

// The header of the image at `src`, if it is sealed (no payload check):
// what holders report and what restores sort by.
bool PeekShardHeader(const void* src, size_t available, ShardInfo* info, size_t* image_bytes);

// A verified image; sections point into the caller's bytes.
struct ShardView {
  ShardInfo info;
  std::string meta;
  std::map<std::string, std::pair<const uint8_t*, size_t>> sections;
  size_t image_bytes = 0;
};

// Verifies magic, both checksums and the section table. `where` names the
// copy in errors ("memory slot 1 of rank 3").
Result<ShardView> ReadShardImage(const void* src, size_t available, const std::string& where);

// Flips one bit of a sealed image's payload: emulated memory corruption for
// the fault injector and tests. False when there is no sealed image.
bool CorruptShardImage(void* image, size_t available);

}  // namespace bulwark::rank_client
