#include "controller/topology.h"

#include <algorithm>

namespace bulwark::controller {

const char* GroupKindName(GroupKind k) {
  switch (k) {
    case GroupKind::kTP: return "tp";
    case GroupKind::kPP: return "pp";
    case GroupKind::kDP: return "dp";
  }
  return "unknown";
}

std::string ParallelGroup::Name() const {
  std::string s = std::string(GroupKindName(kind)) + " group {";
  bool run = ranks.size() > 2;
  for (size_t i = 1; run && i < ranks.size(); ++i) run = ranks[i] == ranks[i - 1] + 1;
  if (run) return s + std::to_string(ranks.front()) + ".." + std::to_string(ranks.back()) + "}";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s + "}";
}

Status Topology::Validate() const {
  if (tp < 1 || pp < 1) return Status::InvalidArgument("parallel: tp and pp must be at least 1");
  if (world < 1) return Status::InvalidArgument("parallel: the world size must be at least 1");
  if (world % (tp * pp) != 0) {
    return Status::InvalidArgument("parallel: tp " + std::to_string(tp) + " x pp " + std::to_string(pp) +
                                   " does not divide world_size " + std::to_string(world) +
                                   "; choose a world_size that is a multiple of tp * pp");
  }
  return Status::OK();
}

Topology::Coord Topology::Of(int rank) const {
  Coord c;
  c.tp = rank % tp;
  c.dp = (rank / tp) % dp();
  c.pp = rank / (tp * dp());
  return c;
}

ParallelGroup Topology::GroupOf(GroupKind kind, int rank) const {
  ParallelGroup g;
  g.kind = kind;
  const Coord c = Of(rank);
  const int n = kind == GroupKind::kTP ? tp : kind == GroupKind::kPP ? pp : dp();
  for (int i = 0; i < n; ++i) {
    Coord x = c;
    (kind == GroupKind::kTP ? x.tp : kind == GroupKind::kPP ? x.pp : x.dp) = i;
    g.ranks.push_back(RankAt(x));
  }
  std::sort(g.ranks.begin(), g.ranks.end());
  return g;
}

std::optional<ParallelGroup> SmallestGroupContaining(const Topology& t, const std::vector<int>& ranks) {
  if (ranks.empty()) return std::nullopt;
  std::optional<ParallelGroup> best;
  for (GroupKind k : {GroupKind::kTP, GroupKind::kPP, GroupKind::kDP}) {
    ParallelGroup g = t.GroupOf(k, ranks.front());
    if (g.ranks.size() <= 1) continue;  // TP=1 or PP=1: no group at all
    bool all = std::all_of(ranks.begin(), ranks.end(),
                           [&](int r) { return std::binary_search(g.ranks.begin(), g.ranks.end(), r); });
    if (all && (!best || g.ranks.size() < best->ranks.size())) best = std::move(g);
  }
  return best;
}

}  // namespace bulwark::controller
