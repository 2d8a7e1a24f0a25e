// Topology: the job's parallel layout (TP x PP x DP) and its groups.
//
// Rank numbering, shared with bulwark-train's --pp (trainer/step/pipeline_plan.h)
// and Megatron-LM's order: the tensor-parallel rank varies fastest, then the
// data-parallel replica, then the pipeline stage:
//
//   rank = tp + TP * (dp + DP * pp)
//
// so a machine's consecutive ranks are one stage's TP and DP peers, and a
// pipeline strides across machines, as real jobs place them. A pure
// data-parallel job (TP = PP = 1) has singleton TP and PP groups and one DP
// group of every rank.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark::controller {

enum class GroupKind { kTP, kPP, kDP };
const char* GroupKindName(GroupKind k);

struct ParallelGroup {
  GroupKind kind = GroupKind::kDP;
  std::vector<int> ranks;  // ascending
  // "pp group {12..15}" / "dp group {4,12,20,28}".
  std::string Name() const;
};

struct Topology {
  int world = 0;
  int tp = 1, pp = 1;

  int dp() const { return tp * pp > 0 ? world / (tp * pp) : 0; }
  // InvalidArgument naming the fix when tp * pp does not divide the world.
  Status Validate() const;

  struct Coord {
    int dp = 0, pp = 0, tp = 0;
  };
  Coord Of(int rank) const;
  int RankAt(const Coord& c) const { return c.tp + tp * (c.dp + dp() * c.pp); }
  // The group of `kind` that holds `rank`.
  ParallelGroup GroupOf(GroupKind kind, int rank) const;
};

// The smallest TP, PP or DP group that contains every rank of `ranks`
// (ties: TP before PP before DP, the cheaper eviction first). A layout's
// size-1 groups (TP=1, PP=1) are no groups: one slow stage of a pipeline
// over-evicts its pipeline. Empty when no group holds them all, or when
// `ranks` is empty.
std::optional<ParallelGroup> SmallestGroupContaining(const Topology& t, const std::vector<int>& ranks);

}  // namespace bulwark::controller
