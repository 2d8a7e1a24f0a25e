// The on-disk checkpoint protocol: names, completion markers, discovery,
// pruning. It knows files, not tensors (see checkpoint.h for contents).
//
//   CKPT_DIR/step-00000040/rank-0.bin   RecordFile kind "ckpt", one per writer
//   CKPT_DIR/step-00000040/COMPLETE     JSON: step, world_size, files
//
// Each shard file is written atomically by its rank. COMPLETE is written by
// rank 0 only after a barrier has seen every rank's file land, so a step
// directory without it is an interrupted save and is never loaded (llm.c's
// DONE marker). Discovery re-verifies every listed file's checksum, so a
// checkpoint torn or corrupted after it completed is reported and skipped.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/record_file.h"
#include "common/status.h"

namespace bulwark::trainer {

std::string StepDirName(int64_t step);         // "step-00000040"
std::string ShardFileName(int rank);           // "rank-0.bin"

Status WriteCompleteMarker(const std::string& step_dir, int64_t step, int world_size,
                           const std::vector<std::string>& files);

struct FoundCheckpoint {
  int64_t step = 0;
  std::string dir;
  std::vector<RecordReader> shards;  // verified, in the marker's order
};

// Whether `step_dir` holds a COMPLETE marker: a save that finished, whatever
// happened to its files since (an interrupted save has none).
bool HasCompleteMarker(const std::string& step_dir);

// The newest step directory whose marker and files all verify. Each rejected
// candidate is passed to `on_skip` with the reason. nullopt: none is valid.
// `at_most`: steps above it are passed over unread (a rollback,
// rank_client::RestoreAtMost).
std::optional<FoundCheckpoint> FindNewestValid(
    const std::string& ckpt_dir, const std::function<void(const std::string& dir, const Status& why)>& on_skip,
    std::optional<int64_t> at_most = std::nullopt);

// Removes every step directory above `step`: after a rollback to at most
// `step` (their states may hold a drift), so that no later resume or
// pruning mistakes them for the newest.
Status RemoveCheckpointsAfter(const std::string& ckpt_dir, int64_t step);

// Keeps the newest `keep` complete checkpoints; removes older ones, and any
// incomplete directory older than the newest complete one (a save that died).
Status PruneCheckpoints(const std::string& ckpt_dir, int keep);

}  // namespace bulwark::trainer
