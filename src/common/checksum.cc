#include "common/checksum.h"

#include <xxh_x86dispatch.h>
#include <xxhash.h>

#include <array>
#include <cstring>
#include <new>

namespace bulwark {
namespace {

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4Full;

inline uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t Round(uint64_t acc, uint64_t in) {
  acc += in * kP2;
  return Rotl(acc, 31) * kP1;
}
inline uint64_t Load64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

}  // namespace

// Four independent lanes over 32-byte stripes (xxHash64's structure) so the
// loop runs at memory speed: checksumming must never be what makes an
// every-step checkpoint slow.
void Checksum::Update(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  total_ += n;
  if (tail_len_ > 0) {
    size_t take = 32 - tail_len_ < n ? 32 - tail_len_ : n;
    std::memcpy(tail_ + tail_len_, p, take);
    tail_len_ += take;
    p += take;
    n -= take;
    if (tail_len_ < 32) return;
    for (int i = 0; i < 4; ++i) lanes_[i] = Round(lanes_[i], Load64(tail_ + 8 * i));
    tail_len_ = 0;
  }
  while (n >= 32) {
    for (int i = 0; i < 4; ++i) lanes_[i] = Round(lanes_[i], Load64(p + 8 * i));
    p += 32;
    n -= 32;
  }
  std::memcpy(tail_, p, n);
  tail_len_ = n;
}

uint64_t Checksum::Digest() const {
  uint64_t h = Rotl(lanes_[0], 1) + Rotl(lanes_[1], 7) + Rotl(lanes_[2], 12) + Rotl(lanes_[3], 18);
  h ^= total_ * kP1;
  size_t i = 0;
  for (; i + 8 <= tail_len_; i += 8) h = Rotl(h ^ Round(0, Load64(tail_ + i)), 27) * kP1 + kP2;
  for (; i < tail_len_; ++i) h = Rotl(h ^ (tail_[i] * kP1), 11) * kP2;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP1;
  h ^= h >> 32;
  return h;
}

std::string Hex64(uint64_t v) {
  static const char* kDigits = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[i] = kDigits[v & 15];
  return s;
}

std::string Checksum::HexDigest() const { return Hex64(Digest()); }

uint64_t Checksum64(const void* data, size_t n) {
  Checksum c;
  c.Update(data, n);
  return c.Digest();
}

// The _dispatch entry points pick SSE2, AVX2 or AVX-512 when first called,
// so one binary runs everywhere at the best width the CPU has.
uint64_t Xxh3Checksum64(const void* data, size_t n) { return XXH3_64bits_dispatch(data, n); }

struct Xxh3Checksum::State {
  XXH3_state_t* s = XXH3_createState();
  ~State() { XXH3_freeState(s); }
};

Xxh3Checksum::Xxh3Checksum() : state_(std::make_unique<State>()) {
  if (state_->s == nullptr) throw std::bad_alloc();
  XXH3_64bits_reset(state_->s);
}
Xxh3Checksum::~Xxh3Checksum() = default;
Xxh3Checksum::Xxh3Checksum(Xxh3Checksum&&) noexcept = default;
Xxh3Checksum& Xxh3Checksum::operator=(Xxh3Checksum&&) noexcept = default;

void Xxh3Checksum::Update(const void* data, size_t n) { XXH3_64bits_update_dispatch(state_->s, data, n); }
uint64_t Xxh3Checksum::Digest() const { return XXH3_64bits_digest(state_->s); }

uint32_t Crc32(const void* data, size_t n) {
  static const auto kTable = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = kTable[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

}  // namespace bulwark
