// ShardClient: a rank's side of every-step in-memory checkpoints.
//
// Saving: the rank owns a region of shared memory, three slots per image,
// that its agent maps. After each optimizer step it starts copying its shard
// into the next slot on a background thread, so the copy overlaps the next
// step's forward and backward, while the other slots keep the previous
// complete images. It blocks only (1) before the next optimizer step, if the
// copy is still running (the update would change what is being copied), and
// (2) before reusing a slot the agent is still sending to the backup peer or
// persisting; a rank whose agent pushes its backup also waits until the
// previous image has been pushed. Both waits are measured.
//
// Why three slots, and why that second wait: a rank that dies right after
// step s's collectives, before sealing s, leaves the others able to finish
// s and seal it. Its backup peer holds s-2 once every push finishes before
// the next image is sealed (without that wait a slow push is superseded and
// the peer may hold older still). The others hold s, s-1 and s-2, so every
// rank shares s-2: a dead machine costs at most two steps instead of a trip
// to durable storage. A killed rank's own memory keeps its newest image: at
// most one step.
//
// Replicated state: when every rank holds the whole state (data parallel,
// unsharded optimizer), the rank that holds rank b's backup (its agent says
// so in BULWARK_SHARD_BACKUP_OF) writes b's image itself, from its own
// memory, into slots of its own region, and each rank tells its agent that
// its peer does the same for it (PEERWRITES), so nothing crosses the
// network. Those backups are of the writer's own steps, so they need no
// wait for a push; the third slot serves a pipeline, whose other stages
// push theirs.
//
// Restoring: the agent offers every copy of the rank's shard it can reach
// (its memory, copies it fetched from peers, durable storage); the caller
// verifies them and agrees with the other ranks on a step (the trainer's
// memory_checkpoint.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "rank_client/shard_image.h"
#include "rank_client/shard_region.h"
#include "common/status.h"

namespace bulwark::rank_client {

// Lowers the calling thread's priority (nice 10): checkpoint work that
// overlaps training should take idle cycles first.
void LowerThreadPriority();

// Where durable copies live: DIR/step-00000100/rank-3.shard.
std::string DurableShardPath(const std::string& dir, int64_t step, int rank);
// The steps with a durable copy of `rank` under `dir`, newest first.
std::vector<int64_t> DurableSteps(const std::string& dir, int rank);

// Set by the agent after a periodic bitwise check found a drifting machine
// (Command.restore_at_most): a rank restores no copy of a later step, from
// memory, a peer, durable storage or its own --ckpt-dir, since the drift
// may have reached it. Unset: no cap.
constexpr const char* kRestoreAtMostEnv = "BULWARK_RESTORE_AT_MOST";
std::optional<int64_t> RestoreAtMost();

// One copy of the rank's shard that a restore may use.
class ShardCopy {
 public:
  std::string source;  // "memory", "peer:m03", "durable"
  ShardInfo info;      // from the header; the payload is checked by Open
  // Verifies and returns the image; for durable copies, reads the file first.
  Result<ShardView> Open();
  size_t bytes() const { return bytes_; }

 private:
  friend class ShardClient;
  const ShardRegion* region_ = nullptr;
  int slot_ = -1;
  std::string path_;
  std::string data_;  // a durable file's bytes once read
  size_t bytes_ = 0;
};

// One image to seal: `sections` must stay unchanged until WaitCopied().
struct ShardImageParts {
  ShardInfo info;
  std::string meta;
  std::vector<ShardSection> sections;
};

class ShardClient {
 public:
  // Connects to the agent at `socket_path` for `rank` of `world_size`.
  static Result<std::unique_ptr<ShardClient>> Connect(const std::string& socket_path, int rank, int world_size);
  ~ShardClient();

  // Every copy the agent offers, memory first, then peers, then durable
  // storage; newest step first within each. Waits for the agent's fetches
  // from peers (it starts them when it starts the ranks).
  Result<std::vector<ShardCopy>> Copies(int timeout_ms = 60000);

  // Unmaps the regions Copies() received; copies from it become invalid.
  void ReleaseCopies() { offered_.clear(); }

  // Creates this rank's region, kSlotsPerImage slots for each of `images`
  // images of up to that many bytes, and hands it to the agent;
  // `peer_writes`: the backup peer writes this rank's backup itself (see
  // above), so the agent pushes nothing.
  Status OpenRegion(const std::vector<size_t>& images, bool peer_writes = false);
  Status OpenRegion(size_t image_bytes) { return OpenRegion(std::vector<size_t>{image_bytes}); }
  // Starts sealing the images (as many as OpenRegion said, in that order)
  // into their next slots in the background. `ready`, if given, runs first
  // on the copying thread and must return once the sections hold their
  // bytes: a GPU rank's sections are pinned host memory that a device copy
  // is still filling, and this way the rank never waits for that copy
  // itself (memory_checkpoint.cc). Its failure is the save's.
  Status BeginSave(std::vector<ShardImageParts> images, std::function<Status()> ready = nullptr);
  Status BeginSave(const ShardInfo& info, std::string meta, std::vector<ShardSection> sections,
                   std::function<Status()> ready = nullptr) {
    return BeginSave(std::vector<ShardImageParts>{{info, std::move(meta), std::move(sections)}}, std::move(ready));
  }
  // Blocks until the image begun by BeginSave is sealed and announced.
  Status WaitCopied();
  // Milliseconds spent blocked in BeginSave and WaitCopied since the last call.
  double TakeBlockedMs();
  // CPU milliseconds the background copies took since the last call: work
  // that overlaps training (and competes with it for cores on a CPU host).
  double TakeCopyCpuMs();

 private:
  ShardClient() = default;
  Status WaitReleased(int slot);
  void CopyLoop();

  int sock_ = -1;
  int rank_ = 0, world_size_ = 1;
  std::vector<std::unique_ptr<ShardRegion>> offered_;  // regions the agent handed over
  ShardRegion region_;
  static constexpr int kSlotsPerImage = 3;
  static constexpr int kMaxSlots = 4 * kSlotsPerImage;
  int images_ = 1;
  bool pushes_ = true;  // the agent pushes this rank's images to the backup peer
  int next_ = 0;        // image i goes to slot kSlotsPerImage*i + next_
  std::atomic<bool> in_agent_[kMaxSlots] = {};  // SAVED sent, RELEASED not yet received
  double blocked_ms_ = 0;
  std::atomic<double> copy_ms_{0};

  std::mutex mu_;
  std::condition_variable cv_;
  struct Job {
    int first_slot;  // image i goes to first_slot + kSlotsPerImage*i
    std::vector<ShardImageParts> images;
    std::function<Status()> ready;
  };
  std::optional<Job> job_;  // set by BeginSave, cleared by the copier when sealed
  Status copy_status_;
  bool stop_ = false;
  std::thread copier_;
};

}  // namespace bulwark::rank_client
