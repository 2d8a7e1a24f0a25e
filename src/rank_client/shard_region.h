// ShardRegion: a block of shared memory (a memfd) holding a few shard image
// slots. A rank writes its images into a region its agent also maps, so the
// agent can send and persist them without a copy, and the memory outlives
// the rank: the agent keeps the descriptor, and a rank restarted in place
// finds its last images there. A machine that dies takes the region with it,
// which is what the backups on other machines are for.
//
//   [RegionHeader, 4 KiB][slot 0][slot 1]...   each slot slot_capacity bytes
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "rank_client/shard_image.h"
#include "common/status.h"

namespace bulwark::rank_client {

class ShardRegion {
 public:
  ShardRegion() = default;
  ShardRegion(ShardRegion&& o) noexcept { *this = std::move(o); }
  ShardRegion& operator=(ShardRegion&& o) noexcept;
  ShardRegion(const ShardRegion&) = delete;
  ShardRegion& operator=(const ShardRegion&) = delete;
  ~ShardRegion();

  // A new region of `slots` empty slots of `slot_capacity` bytes each.
  static Result<ShardRegion> Create(const std::string& name, size_t slot_capacity, int slots);
  // Maps a region received from another process; takes ownership of `fd`.
  static Result<ShardRegion> Map(int fd);

  bool valid() const { return base_ != nullptr; }
  int fd() const { return fd_; }
  int num_slots() const { return slots_; }
  size_t slot_capacity() const { return slot_capacity_; }
  uint8_t* slot(int i) const { return base_ + kHeaderBytes + static_cast<size_t>(i) * slot_capacity_; }

  // The slots that hold a sealed image, newest step first (headers only).
  struct Sealed {
    int slot;
    ShardInfo info;
    size_t bytes;
  };
  std::vector<Sealed> SealedSlots() const;
  // The slot to overwrite next: an empty one, else the oldest sealed one,
  // never `keep` (the newest, while a new image is received).
  int OldestSlot(int keep = -1) const;

  static constexpr size_t kHeaderBytes = 4096;

 private:
  int fd_ = -1;
  uint8_t* base_ = nullptr;
  size_t bytes_ = 0, slot_capacity_ = 0;
  int slots_ = 0;
};

}  // namespace bulwark::rank_client
