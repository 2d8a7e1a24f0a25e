// Which step the ranks restore: a pure function of the copies each holds.
//
// A copy is a point (step, timeline). A restore to step S starts a new
// timeline, because what was computed after S is abandoned while copies of
// it may survive elsewhere, and the job will compute steps with the same
// numbers again. Ranks may only combine copies of the same point.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace bulwark::rank_client {

struct ShardPoint {
  int64_t step = 0;
  uint64_t timeline = 0;
  bool operator<(const ShardPoint& o) const { return step != o.step ? step < o.step : timeline < o.timeline; }
  bool operator==(const ShardPoint& o) const { return step == o.step && timeline == o.timeline; }
};

// The timeline that a restore of `step` from `timeline` continues on.
uint64_t NextTimeline(uint64_t timeline, int64_t step);

// The newest point that every rank holds (`held[r]`: rank r's points), or
// nullopt. `*newest` gets the newest step any rank holds on that point's
// timeline: the progress the fault left behind, for counting lost steps.
std::optional<ShardPoint> NewestCommonPoint(const std::vector<std::vector<ShardPoint>>& held, int64_t* newest);

}  // namespace bulwark::rank_client
