#include "rank_client/shard_region.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace bulwark::rank_client {
namespace {

constexpr char kMagic[8] = {'B', 'W', 'R', 'E', 'G', 'N', '0', '1'};

struct RegionHeader {
  char magic[8];
  uint64_t slot_capacity;
  uint64_t slots;
};

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

}  // namespace

ShardRegion& ShardRegion::operator=(ShardRegion&& o) noexcept {
  if (this != &o) {
    this->~ShardRegion();
    fd_ = o.fd_;
    base_ = o.base_;
    bytes_ = o.bytes_;
    slot_capacity_ = o.slot_capacity_;
    slots_ = o.slots_;
    o.fd_ = -1;
    o.base_ = nullptr;
  }
  return *this;
}

ShardRegion::~ShardRegion() {
  if (base_ != nullptr) ::munmap(base_, bytes_);
  if (fd_ >= 0) ::close(fd_);
  base_ = nullptr;
  fd_ = -1;
}

Result<ShardRegion> ShardRegion::Create(const std::string& name, size_t slot_capacity, int slots) {
  // Slots start on page boundaries so images are page-aligned for sends.
  slot_capacity = (slot_capacity + 4095) / 4096 * 4096;
  int fd = ::memfd_create(name.c_str(), MFD_CLOEXEC);
  if (fd < 0) return Status::IOError(Errno("memfd_create " + name));
  size_t bytes = kHeaderBytes + slot_capacity * static_cast<size_t>(slots);
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    ::close(fd);
    return Status::IOError(Errno("sizing shared memory for " + name + " to " + std::to_string(bytes) + " bytes"));
  }
  RegionHeader h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.slot_capacity = slot_capacity;
  h.slots = static_cast<uint64_t>(slots);
  if (::pwrite(fd, &h, sizeof h, 0) != static_cast<ssize_t>(sizeof h)) {
    ::close(fd);
    return Status::IOError(Errno("writing the header of " + name));
  }
  return Map(fd);
}

Result<ShardRegion> ShardRegion::Map(int fd) {
  ShardRegion r;
  r.fd_ = fd;
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::IOError(Errno("fstat of a shard region"));
  RegionHeader h{};
  if (static_cast<size_t>(st.st_size) < kHeaderBytes || ::pread(fd, &h, sizeof h, 0) != sizeof h ||
      std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) {
    return Status::Corrupt("a shard region without its header (not made by ShardRegion::Create)");
  }
  if (kHeaderBytes + h.slot_capacity * h.slots > static_cast<uint64_t>(st.st_size)) {
    return Status::Corrupt("a shard region smaller than its header says");
  }
  void* p = ::mmap(nullptr, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Status::IOError(Errno("mapping a shard region"));
  r.base_ = static_cast<uint8_t*>(p);
  r.bytes_ = st.st_size;
  r.slot_capacity_ = h.slot_capacity;
  r.slots_ = static_cast<int>(h.slots);
  return r;
}

std::vector<ShardRegion::Sealed> ShardRegion::SealedSlots() const {
  std::vector<Sealed> out;
  for (int i = 0; i < slots_; ++i) {
    Sealed s{i, {}, 0};
    if (PeekShardHeader(slot(i), slot_capacity_, &s.info, &s.bytes)) out.push_back(s);
  }
  std::sort(out.begin(), out.end(), [](const Sealed& a, const Sealed& b) { return a.info.step > b.info.step; });
  return out;
}

int ShardRegion::OldestSlot(int keep) const {
  int best = -1;
  int64_t best_step = 0;
  for (int i = 0; i < slots_; ++i) {
    if (i == keep) continue;
    ShardInfo info;
    if (!PeekShardHeader(slot(i), slot_capacity_, &info, nullptr)) return i;
    if (best < 0 || info.step < best_step) best = i, best_step = info.step;
  }
  return best;
}

}  // namespace bulwark::rank_client
