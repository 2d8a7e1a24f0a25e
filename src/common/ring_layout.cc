#include "common/ring_layout.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

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

RingPlan PlanFor(int rank, int world, int group, uint64_t nonce, const std::function<std::string(int)>& address) {
  RingPlan plan;
  plan.nonce = nonce;
  plan.group = group;
  for (int peer : LinkedRanks(rank, world, group)) plan.identities[peer] = address(peer);
  return plan;
}

std::string EncodeRingPlan(const RingPlan& plan) {
  std::string out = std::to_string(plan.nonce) + ";" + std::to_string(plan.group) + ";";
  for (const auto& [rank, addr] : plan.identities) {
    if (out.back() != ';') out += ",";
    out += std::to_string(rank) + "=" + addr;
  }
  return out;
}

Result<RingPlan> DecodeRingPlan(const std::string& text) {
  const auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("ring plan '" + text.substr(0, 80) + "': " + why +
                                   " (want nonce;group;rank=addr:port,...)");
  };
  const size_t a = text.find(';'), b = a == std::string::npos ? a : text.find(';', a + 1);
  if (b == std::string::npos) return bad("two ';' missing");
  RingPlan plan;
  char* end = nullptr;
  plan.nonce = std::strtoull(text.c_str(), &end, 10);
  if (end != text.c_str() + a || a == 0) return bad("the nonce is not a number");
  plan.group = static_cast<int>(std::strtol(text.c_str() + a + 1, &end, 10));
  if (end != text.c_str() + b || b == a + 1 || plan.group < 0) return bad("the group is not a number");
  for (size_t at = b + 1; at < text.size();) {
    size_t comma = text.find(',', at);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(at, comma - at);
    const size_t eq = item.find('=');
    const long r = std::strtol(item.c_str(), &end, 10);
    if (eq == std::string::npos || eq == 0 || end != item.c_str() + eq || r < 0 ||
        item.find(':', eq) == std::string::npos) {
      return bad("'" + item + "' is not rank=addr:port");
    }
    plan.identities[static_cast<int>(r)] = item.substr(eq + 1);
    at = comma + 1;
  }
  return plan;
}

std::string RingSlotAddress(const std::string& ring_addr, int local, int ring) {
  const size_t colon = ring_addr.rfind(':');
  const int per_ring = ring == 0 ? kRingSlotPorts : kRingSlotPorts / 2;  // a pipeline's rank uses two
  if (colon == std::string::npos || colon == 0 || local < 0 || local >= per_ring || ring < 0 || ring > 1) return "";
  const int base = std::atoi(ring_addr.c_str() + colon + 1);
  if (base <= 0) return "";
  return ring_addr.substr(0, colon) + ":" + std::to_string(base + ring * kRingSlotPorts / 2 + local);
}

uint64_t RingNonce(const std::string& job, int64_t generation) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the job's id
  for (unsigned char c : job) h = (h ^ c) * 1099511628211ull;
  return (h << 20) ^ static_cast<uint64_t>(generation);
}

}  // namespace bulwark
