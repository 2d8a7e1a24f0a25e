// Fuzzes the shard image reader (client/shard_image.h): images arrive from
// shared memory written by a rank that may have died midway and from peers
// over the network. As with RecordFile, most inputs are sealed first (both
// checksums rewritten) so the section table is reached; the rest are read as
// they are.
#include <cstdint>
#include <cstring>
#include <string>

#include "rank_client/shard_image.h"
#include "common/checksum.h"

using bulwark::rank_client::ShardHeader;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool seal = data[0] % 4 != 0;
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (seal && bytes.size() >= sizeof(ShardHeader)) {
    ShardHeader h;
    std::memcpy(&h, bytes.data(), sizeof h);
    std::memcpy(h.magic, "BWSHARD1", 8);
    h.version = 1;
    // Keep the claimed length when it fits (a torn image says more than is
    // there), otherwise claim exactly what follows the header.
    const uint64_t avail = bytes.size() - sizeof h;
    if (h.payload_bytes > avail || data[0] % 2 == 0) h.payload_bytes = avail;
    // The checksum the claimed kind uses; an unknown kind stays unknown.
    const uint8_t* payload = reinterpret_cast<const uint8_t*>(bytes.data()) + sizeof h;
    if (h.checksum_kind == bulwark::rank_client::kCrc32) {
      h.payload_checksum = bulwark::Crc32(payload, h.payload_bytes);
    } else if (h.checksum_kind == bulwark::rank_client::kXxh3) {
      h.payload_checksum = bulwark::Xxh3Checksum64(payload, h.payload_bytes);
    } else {
      h.payload_checksum = bulwark::Checksum64(payload, h.payload_bytes);
    }
    h.header_checksum = bulwark::Checksum64(&h, offsetof(ShardHeader, header_checksum));
    std::memcpy(&bytes[0], &h, sizeof h);
  }
  auto v = bulwark::rank_client::ReadShardImage(bytes.data(), bytes.size(), "fuzz image");
  if (!v.ok()) return 0;
  // Every section must lie inside the image.
  const auto* begin = reinterpret_cast<const uint8_t*>(bytes.data());
  for (const auto& [name, span] : v->sections) {
    if (span.first < begin || span.first + span.second > begin + bytes.size()) __builtin_trap();
  }
  if (v->image_bytes > bytes.size()) __builtin_trap();
  return 0;
}
