#include "common/ring_layout.h"

#include <algorithm>
#include <cmath>

namespace bulwark {

TwoLevel TwoLevel::For(int world, int requested) {
  TwoLevel t;
  t.W = std::max(1, world);
  int g = requested;
  if (g == 0) g = t.W < 16 ? t.W : static_cast<int>(std::ceil(std::sqrt(static_cast<double>(t.W))));
  t.G = std::clamp(g, 1, t.W);
  t.K = (t.W + t.G - 1) / t.G;
  if (t.G == 1) t.K = 1;  // flat: one group of everyone, no cross rings
  if (t.K == 1) t.G = t.W;
  return t;
}

int TwoLevel::GroupOf(int rank) const {
  int g = static_cast<int>(static_cast<int64_t>(rank) * K / W);
  while (g + 1 < K && First(g + 1) <= rank) ++g;
  while (g > 0 && First(g) > rank) --g;
  return g;
}

// The group's reduce-scatter cuts the P = G parts into Size(g) chunks of
// consecutive parts; member pos ends with chunk pos + 1 (RingPass).
std::pair<int, int> TwoLevel::PartsOf(int g, int pos) const {
  const int s = Size(g);
  const Span c = ChunkOf(G, s, (pos + 1) % s);
  return {static_cast<int>(c.begin), static_cast<int>(c.end)};
}

int TwoLevel::OwnerOf(int g, int part) const {
  const int s = Size(g);
  for (int pos = 0; pos < s; ++pos) {
    const auto [b, e] = PartsOf(g, pos);
    if (part >= b && part < e) return First(g) + pos;
  }
  return First(g);  // not reached: the chunks cover every part
}

RingNeighbours NeighboursOf(const TwoLevel& L, int rank) {
  RingNeighbours n;
  const int g = L.GroupOf(rank), first = L.First(g), s = L.Size(g), pos = rank - first;
  n.group_pred = first + (pos + s - 1) % s;
  n.group_succ = first + (pos + 1) % s;
  const auto [b, e] = L.PartsOf(g, pos);
  for (int part = b; part < e; ++part) {
    n.cross[part] = {L.OwnerOf((g + L.K - 1) % L.K, part), L.OwnerOf((g + 1) % L.K, part)};
  }
  return n;
}

std::set<int> LinkedRanks(int rank, int world, int group) {
  if (world <= 1) return {};
  std::set<int> out = {(rank + world - 1) % world, (rank + 1) % world};
  const TwoLevel L = TwoLevel::For(world, group);
  if (!L.flat()) {
    const RingNeighbours n = NeighboursOf(L, rank);
    out.insert({n.group_pred, n.group_succ});
    for (const auto& [part, ends] : n.cross) out.insert({ends.first, ends.second});
  }
  out.erase(rank);
  return out;
}

}  // namespace bulwark
