#include "rank_client/shard_image.h"

#include <atomic>
#include <cstring>

#include "common/checksum.h"

namespace bulwark::rank_client {
namespace {

constexpr char kMagic[8] = {'B', 'W', 'S', 'H', 'A', 'R', 'D', '1'};
constexpr uint32_t kVersion = 1;
// Copy and checksum in blocks small enough to stay in L2, so the checksum
// reads what the copy just wrote from cache: one pass over memory, not two.
constexpr size_t kBlock = 128 << 10;

uint64_t HeaderChecksum(const ShardHeader& h) { return Checksum64(&h, offsetof(ShardHeader, header_checksum)); }

// Appends bytes to the payload under construction, checksumming as it goes.
class PayloadWriter {
 public:
  PayloadWriter(uint8_t* dst) : dst_(dst) {}
  void Put(const void* src, size_t n) {
    const auto* s = static_cast<const uint8_t*>(src);
    while (n > 0) {
      size_t k = n < kBlock ? n : kBlock;
      std::memcpy(dst_ + at_, s, k);
      sum_.Update(dst_ + at_, k);
      at_ += k;
      s += k;
      n -= k;
    }
  }
  void PutU64(uint64_t v) { Put(&v, sizeof v); }
  size_t size() const { return at_; }
  uint64_t digest() const { return sum_.Digest(); }

 private:
  uint8_t* dst_;
  size_t at_ = 0;
  Xxh3Checksum sum_;
};

class PayloadReader {
 public:
  PayloadReader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  bool U64(uint64_t* v) {
    if (n_ - at_ < 8) return false;
    std::memcpy(v, p_ + at_, 8);
    at_ += 8;
    return true;
  }
  bool Bytes(size_t k, const uint8_t** out) {
    if (n_ - at_ < k) return false;
    *out = p_ + at_;
    at_ += k;
    return true;
  }
  size_t left() const { return n_ - at_; }

 private:
  const uint8_t* p_;
  size_t n_, at_ = 0;
};

}  // namespace

size_t ShardImageSize(const std::vector<ShardSection>& sections, size_t meta_bytes) {
  size_t n = sizeof(ShardHeader) + 8 + meta_bytes + 8;
  for (const auto& s : sections) n += 8 + s.name.size() + 8 + s.size;
  return n;
}

Status WriteShardImage(void* dst, size_t capacity, const ShardInfo& info, const std::string& meta,
                       const std::vector<ShardSection>& sections) {
  size_t need = ShardImageSize(sections, meta.size());
  if (need > capacity) {
    return Status::InvalidArgument("shard image of " + std::to_string(need) + " bytes does not fit its slot of " +
                                   std::to_string(capacity));
  }
  auto* h = static_cast<ShardHeader*>(dst);
  // Unseal before touching the payload: a reader never sees the old header
  // over a half-new payload.
  h->header_checksum = 0;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  PayloadWriter w(static_cast<uint8_t*>(dst) + sizeof(ShardHeader));
  w.PutU64(meta.size());
  w.Put(meta.data(), meta.size());
  w.PutU64(sections.size());
  for (const auto& s : sections) {
    w.PutU64(s.name.size());
    w.Put(s.name.data(), s.name.size());
    w.PutU64(s.size);
  }
  for (const auto& s : sections) w.Put(s.data, s.size);
  ShardHeader next{};
  std::memcpy(next.magic, kMagic, sizeof kMagic);
  next.version = kVersion;
  next.checksum_kind = kXxh3;
  next.step = info.step;
  next.rank = info.rank;
  next.world_size = info.world_size;
  next.payload_bytes = w.size();
  next.payload_checksum = w.digest();
  next.header_checksum = 0;
  std::memcpy(h, &next, sizeof next);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  h->header_checksum = HeaderChecksum(next);
  return Status::OK();
}

bool PeekShardHeader(const void* src, size_t available, ShardInfo* info, size_t* image_bytes) {
  if (available < sizeof(ShardHeader)) return false;
  ShardHeader h;
  std::memcpy(&h, src, sizeof h);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0 || h.version != kVersion) return false;
  if (h.header_checksum == 0 || h.header_checksum != HeaderChecksum(h)) return false;
  if (h.payload_bytes > available - sizeof(ShardHeader)) return false;
  if (info != nullptr) *info = {h.step, h.rank, h.world_size};
  if (image_bytes != nullptr) *image_bytes = sizeof(ShardHeader) + h.payload_bytes;
  return true;
}

Result<ShardView> ReadShardImage(const void* src, size_t available, const std::string& where) {
  ShardView v;
  if (!PeekShardHeader(src, available, &v.info, &v.image_bytes)) {
    return Status::Corrupt(where + ": no complete shard (torn, never written, or its header is damaged)");
  }
  ShardHeader h;
  std::memcpy(&h, src, sizeof h);
  const auto* payload = static_cast<const uint8_t*>(src) + sizeof(ShardHeader);
  uint64_t sum = 0;
  switch (h.checksum_kind) {
    case kChecksum64: sum = Checksum64(payload, h.payload_bytes); break;
    case kCrc32: sum = Crc32(payload, h.payload_bytes); break;
    case kXxh3: sum = Xxh3Checksum64(payload, h.payload_bytes); break;
    default:
      return Status::Corrupt(where + ": shard of step " + std::to_string(h.step) + " has unknown checksum kind " +
                             std::to_string(h.checksum_kind) + " (written by a newer bulwark?)");
  }
  if (sum != h.payload_checksum) {
    return Status::Corrupt(where + ": shard of step " + std::to_string(h.step) + " fails its checksum");
  }
  PayloadReader r(payload, h.payload_bytes);
  uint64_t meta_len = 0, count = 0;
  const uint8_t* p = nullptr;
  if (!r.U64(&meta_len) || !r.Bytes(meta_len, &p)) return Status::Corrupt(where + ": truncated meta");
  v.meta.assign(reinterpret_cast<const char*>(p), meta_len);
  if (!r.U64(&count)) return Status::Corrupt(where + ": truncated section table");
  std::vector<std::pair<std::string, uint64_t>> table;
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t len = 0, size = 0;
    if (!r.U64(&len) || !r.Bytes(len, &p) || !r.U64(&size)) return Status::Corrupt(where + ": truncated section table");
    table.emplace_back(std::string(reinterpret_cast<const char*>(p), len), size);
  }
  for (const auto& [name, size] : table) {
    if (!r.Bytes(size, &p)) return Status::Corrupt(where + ": section '" + name + "' is truncated");
    v.sections[name] = {p, size};
  }
  return v;
}

bool CorruptShardImage(void* image, size_t available) {
  size_t bytes = 0;
  if (!PeekShardHeader(image, available, nullptr, &bytes) || bytes <= sizeof(ShardHeader)) return false;
  auto* p = static_cast<uint8_t*>(image);
  p[sizeof(ShardHeader) + (bytes - sizeof(ShardHeader)) / 2] ^= 0x10;
  return true;
}

}  // namespace bulwark::rank_client
