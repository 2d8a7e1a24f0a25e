#include "rank_client/restore_point.h"

#include <algorithm>
#include <set>

#include "common/checksum.h"

namespace bulwark::rank_client {

uint64_t NextTimeline(uint64_t timeline, int64_t step) {
  const uint64_t v[2] = {timeline, static_cast<uint64_t>(step)};
  return Checksum64(v, sizeof v);
}

std::optional<ShardPoint> NewestCommonPoint(const std::vector<std::vector<ShardPoint>>& held, int64_t* newest) {
  if (held.empty()) return std::nullopt;
  std::vector<std::set<ShardPoint>> have;
  for (const auto& h : held) have.emplace_back(h.begin(), h.end());
  std::optional<ShardPoint> best;
  for (const ShardPoint& p : have[0]) {
    bool all = true;
    for (size_t r = 1; r < have.size() && all; ++r) all = have[r].count(p) > 0;
    if (all && (!best || best->step < p.step)) best = p;
  }
  if (best) {
    for (const auto& h : have)
      for (const ShardPoint& p : h)
        if (p.timeline == best->timeline) *newest = std::max(*newest, p.step);
  }
  return best;
}

}  // namespace bulwark::rank_client
