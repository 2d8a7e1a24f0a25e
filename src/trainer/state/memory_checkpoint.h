// Every-step in-memory checkpoints, the trainer's side.
//
// A rank's shard is its slice of the state: the parameters, AdamW moments
// and module buffers of the range it owns in the ZeRO-1 split (part r of W,
// dist.h's ChunkOf; with an unsharded optimizer the moments are replicated
// and the same split applies), plus its data position, step and RNG. Together
// the W shards are the whole state, each 1/W of it, so every rank copies
// the same amount each step, sharded optimizer or not.
//
// Saving goes through rank_client::ShardClient: the copy runs in the background
// during the next forward and backward; WaitCopied() must come before the
// next optimizer step changes what is being copied.
//
// Restoring: each rank lists the copies its agent offers (its machine's
// memory, copies fetched from backup peers), verifies them, and the ranks
// agree on the newest step that every rank holds; only if there is none do
// they look at durable storage. Each rank loads that step from its fastest
// good copy and the ranks all-gather the rest.
//
// Timelines: a restore to step S abandons whatever was computed after S, yet
// copies of those abandoned steps may survive on other machines, and the
// job will compute steps of the same numbers again. Every shard therefore
// names its timeline, which a restore changes (a hash of the old timeline
// and S), and ranks agree on a (step, timeline) pair: two copies of step 900
// from different timelines are never mixed.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rank_client/restore_point.h"
#include "rank_client/shard_client.h"
#include "common/status.h"
#include "trainer/optim/adamw.h"
#include "trainer/state/checkpoint.h"
#include "trainer/state/device_stage.h"
#include "trainer/config.h"
#include "trainer/comm/dist.h"
#include "trainer/model/model.h"
#include "trainer/model/params.h"

namespace bulwark::trainer {

struct RestoreOutcome {
  int64_t step = 0;
  int64_t newest_step = 0;     // the newest step any rank's sources held
  std::string source;          // the slowest kind any rank used: memory < peer < durable
  std::vector<std::string> sources;  // per rank
  double ms = 0;               // slowest rank's restore time
};

// OK when the CPU generator can resume from these bytes (a copy's "rng"
// section); otherwise Corrupt, saying why.
Status ResumableGeneratorState(const void* bytes, size_t n);

class MemoryCheckpoint {
 public:
  using Note = std::function<void(const std::string&)>;
  // nullptr when in-memory checkpoints are off: --memory-ckpt off, or auto
  // with no agent. Every rank decides the same way (an agent runs them all).
  // `comm` is the whole world: shards are named by world rank and every rank
  // agrees on one step. `group` holds the ranks that share `store`'s state
  // and split it into shards (the world for data parallelism; a stage's DP
  // group in a pipeline, whose stages hold different parameters); nullptr:
  // the world.
  static Result<std::unique_ptr<MemoryCheckpoint>> Open(const TrainConfig& cfg, Comm& comm, Transformer& model,
                                                        ParamStore& store, AdamW& opt, Note note,
                                                        Comm* group = nullptr);

  // Waits for the image being copied, if any (see the .cc for why).
  ~MemoryCheckpoint();

  // Collective. Restores the newest step every rank can restore into the
  // model, store, optimizer and `st`; nullopt when the ranks share none.
  Result<std::optional<RestoreOutcome>> Restore(TrainState* st);

  // The run resumed from a disk checkpoint of `step`: a timeline of its own.
  void ResumedFromDisk(int64_t step);
  // The state came from live ranks (elastic.h), which abandoned nothing:
  // later copies continue the timeline they were on.
  uint64_t timeline() const { return timeline_; }
  void ContinueTimeline(uint64_t timeline) { timeline_ = timeline; }

  // Starts saving the state after step st.step (call after the update).
  Status Save(const TrainState& st);
  // Call before the next optimizer step.
  Status WaitCopied() { return client_->WaitCopied(); }
  double TakeBlockedMs() { return client_->TakeBlockedMs(); }
  double TakeCopyCpuMs() { return client_->TakeCopyCpuMs(); }

 private:
  MemoryCheckpoint(const TrainConfig& cfg, Comm& comm, Comm& group, Transformer& model, ParamStore& store,
                   AdamW& opt, Note note);
  // A rank's share of the state: parameter range and byte range of the
  // buffers (staged: they change only at POET merges).
  struct Slice {
    int rank = 0;  // the world rank whose shard this is
    int64_t begin = 0, end = 0, buf_begin = 0, buf_end = 0;
    std::vector<uint8_t> buffer_stage;
  };
  // The slice of the rank at `index` in the group, named `rank` in the world.
  Slice SliceOf(int index, int rank) const;
  // The module buffers' bytes as whole floats, the unit they are gathered in.
  int64_t BufferFloats() const { return (buffer_bytes_ + 3) / 4; }
  // `staged`: the slice's index in stage_'s host copies (a GPU rank).
  std::vector<rank_client::ShardSection> Sections(const Slice& s, size_t staged);
  // A GPU rank's slices of parameters and moments, queued for the host.
  void StageFromDevice();
  std::string Meta(const TrainState& st, const Slice& s) const;
  void StageBuffers(Slice& s);
  Status Check(const rank_client::ShardView& v, const std::string& where) const;
  Status Load(const rank_client::ShardView& v, TrainState* st);
  // Collective: rank_client::NewestCommonPoint over every rank's points.
  Result<std::optional<rank_client::ShardPoint>> Agree(const std::vector<rank_client::ShardPoint>& mine, int64_t* newest);

  const TrainConfig& cfg_;
  Comm& comm_;
  Comm& group_;
  Transformer& model_;
  ParamStore& store_;
  AdamW& opt_;
  Note note_;
  std::unique_ptr<rank_client::ShardClient> client_;
  int64_t buffer_bytes_ = 0;
  Slice mine_;
  int64_t begin_ = 0, end_ = 0, buf_begin_ = 0, buf_end_ = 0;  // mine_'s ranges, for restores
  std::optional<Slice> theirs_;  // the rank whose backup this one writes (replicated state)
  std::unique_ptr<DeviceStage> stage_;  // a GPU rank's pinned host copies; null on the CPU
  bool buffers_staged_ = false;
  std::vector<uint8_t> rng_stage_;
  bool region_open_ = false;
  uint64_t timeline_ = 0;  // 0: the run that started from step 0
};

}  // namespace bulwark::trainer
