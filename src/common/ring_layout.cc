#include "common/ring_layout.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <vector>

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

RingPlan PlanFor(int rank, const RankRing& view, int world, uint64_t nonce,
                 const std::function<std::string(int)>& address) {
  RingPlan plan;
  plan.nonce = nonce;
  std::set<int> peers = view.Peers();
  if (world > 1) peers.insert({(rank + world - 1) % world, (rank + 1) % world});
  peers.erase(rank);
  for (int peer : peers) plan.identities[peer] = address(peer);
  plan.layout = view;
  return plan;
}

// ------------------------------------------------------- explicit layout

RingLayout RingLayout::Default(int world, int requested) {
  const TwoLevel L = TwoLevel::For(world, requested);
  RingLayout out;
  out.parts = L.flat() ? 1 : L.G;
  for (int r = 0; r < L.W; ++r) {
    const int g = L.flat() ? 0 : L.GroupOf(r);
    out.group.push_back(g);
    out.owns.push_back(L.flat() ? std::make_pair(0, 1) : L.PartsOf(g, r - L.First(g)));
    out.tier.push_back(0);
  }
  return out;
}

int RingLayout::groups() const {
  int k = 0;
  for (int g : group) k = std::max(k, g + 1);
  return k;
}

RingLayout RingLayout::Without(int x) const {
  RingLayout out = *this;
  if (x < 0 || x >= world()) return out;
  const int g = group[x];
  const auto [b, e] = owns[x];
  // The heir: a member of the group whose parts end where x's begin or
  // begin where they end; the one that holds fewer, so the work stays even.
  int heir = -1;
  for (int r = 0; r < world() && !flat(); ++r) {
    if (r == x || group[r] != g || (owns[r].second != b && owns[r].first != e)) continue;
    const auto width = [&](int q) { return owns[q].second - owns[q].first; };
    if (heir < 0 || width(r) < width(heir)) heir = r;
  }
  if (heir >= 0) {
    out.owns[heir] = {std::min(b, owns[heir].first), std::max(e, owns[heir].second)};
    out.tier[heir] = *std::max_element(tier.begin(), tier.end()) + 1;
  }
  if (heir < 0 && !flat()) out.CloseCrossRings(g);
  out.group.erase(out.group.begin() + x);
  out.owns.erase(out.owns.begin() + x);
  out.tier.erase(out.tier.begin() + x);
  // A group of one that is gone: the later groups close up, each keeping
  // its members and parts (its place on the cross rings moves down one).
  if (std::find(out.group.begin(), out.group.end(), g) == out.group.end()) {
    for (int& h : out.group) h -= h > g ? 1 : 0;
  }
  return out;
}

// Group g (a group of one, about to go) leaves every cross ring: on each
// part's ring the owners in the groups before and after it link. Who links
// to whom is where their members' parts overlap: a tree (one member's parts
// may overlap several of the other group's). Tiers that fall with the
// distance from a root make each member dial only its parent on it.
void RingLayout::CloseCrossRings(int g) {
  const int K = groups();
  const int a = (g + K - 1) % K, b = (g + 1) % K;
  if (a == b) return;  // two groups left one: the layout is flat
  std::vector<int> in_a, in_b;
  for (int r = 0; r < world(); ++r) {
    if (group[r] == a) in_a.push_back(r);
    if (group[r] == b) in_b.push_back(r);
  }
  const auto by_parts = [&](int x, int y) { return owns[x].first < owns[y].first; };
  std::sort(in_a.begin(), in_a.end(), by_parts);
  std::sort(in_b.begin(), in_b.end(), by_parts);
  std::map<int, std::vector<int>> next_to;  // the overlaps, walked in part order
  for (size_t i = 0, j = 0; i < in_a.size() && j < in_b.size();) {
    next_to[in_a[i]].push_back(in_b[j]);
    next_to[in_b[j]].push_back(in_a[i]);
    const int ea = owns[in_a[i]].second, eb = owns[in_b[j]].second;
    i += ea <= eb ? 1 : 0;
    j += eb <= ea ? 1 : 0;
  }
  const int base = *std::max_element(tier.begin(), tier.end()) + world() + 1;
  std::map<int, int> depth;
  for (const auto& [root, unused] : next_to) {
    if (depth.count(root) != 0) continue;
    std::vector<int> queue = {root};
    depth[root] = 0;
    for (size_t at = 0; at < queue.size(); ++at) {
      for (int n : next_to[queue[at]]) {
        if (depth.emplace(n, depth[queue[at]] + 1).second) queue.push_back(n);
      }
    }
  }
  for (const auto& [r, d] : depth) tier[r] = base - d;
}

RingLayout RingLayout::WithJoiner() const {
  RingLayout out = *this;
  const int top = tier.empty() ? 0 : *std::max_element(tier.begin(), tier.end()) + 1;
  const int K = groups();
  if (flat()) {
    out.group.push_back(0);
    out.owns.push_back({0, 1});
    out.tier.push_back(top);
    return out;
  }
  std::vector<int> size(K, 0);
  for (int g : group) ++size[g];
  const int g = static_cast<int>(std::min_element(size.begin(), size.end()) - size.begin());
  if (size[g] >= parts) {  // every group full: a new group of one, holding every part
    out.group.push_back(K);
    out.owns.push_back({0, parts});
    out.tier.push_back(top);
    return out;
  }
  int donor = -1;  // fewer members than parts: someone holds two or more
  for (int r = 0; r < world(); ++r) {
    const auto width = [&](int q) { return owns[q].second - owns[q].first; };
    if (group[r] == g && (donor < 0 || width(r) > width(donor))) donor = r;
  }
  const auto [b, e] = owns[donor];
  const int mid = b + (e - b) / 2;
  out.owns[donor] = {b, mid};
  out.group.push_back(g);
  out.owns.push_back({mid, e});
  out.tier.push_back(top);
  return out;
}

Status RingLayout::Check() const {
  const int W = world(), K = groups();
  if (static_cast<int>(owns.size()) != W || static_cast<int>(tier.size()) != W) {
    return Status::InvalidArgument("a ring layout's group, owns and tier differ in length");
  }
  std::vector<std::vector<int>> held(K, std::vector<int>(flat() ? 0 : parts, 0));
  for (int r = 0; r < W; ++r) {
    if (group[r] < 0) return Status::InvalidArgument("rank " + std::to_string(r) + " has no group");
    const auto [b, e] = owns[r];
    if (flat()) continue;
    if (b < 0 || e > parts || b >= e) return Status::InvalidArgument("rank " + std::to_string(r) + " holds no parts");
    for (int p = b; p < e; ++p) ++held[group[r]][p];
  }
  for (int g = 0; g < K; ++g) {
    if (std::find(group.begin(), group.end(), g) == group.end()) {
      return Status::InvalidArgument("group " + std::to_string(g) + " has no members");
    }
    for (int p = 0; p < static_cast<int>(held[g].size()); ++p) {
      if (held[g][p] != 1) {
        return Status::InvalidArgument("part " + std::to_string(p) + " of group " + std::to_string(g) + " is held " +
                                       std::to_string(held[g][p]) + " times");
      }
    }
  }
  return Status::OK();
}

// A group of one is its own neighbour on its ring, and links nothing there.
std::set<int> RankRing::Peers() const {
  std::set<int> out;
  if (size > 1) out.insert({group_pred, group_succ});
  for (const auto& [part, ends] : cross) out.insert({ends.first, ends.second});
  out.erase(-1);
  return out;
}

namespace {

// `r`'s view, given its group's members in ring order and who holds part
// p in group h (`owner(h, p)`).
RankRing Build(const RingLayout& L, int r, int K, const std::vector<int>& members,
               const std::function<int(int, int)>& owner) {
  RankRing v;
  const int s = static_cast<int>(members.size());
  const int i = static_cast<int>(std::find(members.begin(), members.end(), r) - members.begin());
  v.parts = L.flat() ? 1 : L.parts;
  v.groups = K;
  v.group = L.group[r];
  v.size = s;
  v.pos = i;
  v.group_pred = members[(i + s - 1) % s];
  v.group_succ = members[(i + 1) % s];
  if (!L.flat()) {
    for (int q : members) v.chunks.push_back(L.owns[q]);
    for (int p = L.owns[r].first; p < L.owns[r].second; ++p) {
      v.cross[p] = {owner((v.group + K - 1) % K, p), owner((v.group + 1) % K, p)};
    }
  }
  for (int peer : v.Peers()) {
    if (L.tier[r] != L.tier[peer] ? L.tier[r] < L.tier[peer] : r < peer) v.dials.insert(peer);
  }
  return v;
}

}  // namespace

RankRing ViewOf(const RingLayout& L, int rank) {
  std::vector<int> members;
  for (int q = 0; q < L.world(); ++q) {
    if (L.group[q] == L.group[rank]) members.push_back(q);
  }
  auto owner = [&](int h, int p) {
    for (int q = 0; q < L.world(); ++q) {
      if (L.group[q] == h && L.owns[q].first <= p && p < L.owns[q].second) return q;
    }
    return -1;
  };
  return Build(L, rank, std::max(1, L.groups()), members, owner);
}

std::vector<RankRing> ViewsOf(const RingLayout& L) {
  const int W = L.world(), K = std::max(1, L.groups());
  std::vector<std::vector<int>> members(K);
  for (int r = 0; r < W; ++r) members[L.group[r]].push_back(r);
  std::vector<std::vector<int>> held(K, std::vector<int>(L.flat() ? 0 : L.parts, -1));
  for (int r = 0; r < W && !L.flat(); ++r) {
    for (int p = L.owns[r].first; p < L.owns[r].second; ++p) held[L.group[r]][p] = r;
  }
  std::vector<RankRing> out;
  out.reserve(W);
  for (int r = 0; r < W; ++r) {
    out.push_back(Build(L, r, K, members[L.group[r]], [&](int h, int p) { return held[h][p]; }));
  }
  return out;
}

// ------------------------------------------------------------- plan text

namespace {

std::vector<long> ViewNumbers(const RankRing& v) {
  std::vector<long> n = {v.parts, v.groups, v.group, v.size, v.pos, v.group_pred, v.group_succ,
                         static_cast<long>(v.chunks.size())};
  for (const auto& [b, e] : v.chunks) n.insert(n.end(), {b, e});
  n.push_back(static_cast<long>(v.cross.size()));
  for (const auto& [p, ends] : v.cross) n.insert(n.end(), {p, ends.first, ends.second});
  n.push_back(static_cast<long>(v.dials.size()));
  n.insert(n.end(), v.dials.begin(), v.dials.end());
  return n;
}

// The numbers back into a view; nullopt when they are not one.
std::optional<RankRing> ViewFrom(const std::vector<long>& n) {
  size_t at = 0;
  auto next = [&](long* x) {
    if (at >= n.size()) return false;
    *x = n[at++];
    return true;
  };
  long f[8];
  for (long& x : f) {
    if (!next(&x)) return std::nullopt;
  }
  RankRing v;
  v.parts = static_cast<int>(f[0]);
  v.groups = static_cast<int>(f[1]);
  v.group = static_cast<int>(f[2]);
  v.size = static_cast<int>(f[3]);
  v.pos = static_cast<int>(f[4]);
  v.group_pred = static_cast<int>(f[5]);
  v.group_succ = static_cast<int>(f[6]);
  if (v.parts < 1 || v.groups < 1 || v.group >= v.groups || v.size < 1 || v.pos >= v.size) return std::nullopt;
  if (f[7] != 0 && f[7] != v.size) return std::nullopt;
  for (long i = 0, b = 0, e = 0; i < f[7]; ++i) {
    if (!next(&b) || !next(&e) || b < 0 || e > v.parts || b >= e) return std::nullopt;
    v.chunks.push_back({static_cast<int>(b), static_cast<int>(e)});
  }
  long count = 0;
  if (!next(&count) || count < 0) return std::nullopt;
  for (long i = 0, p = 0, a = 0, z = 0; i < count; ++i) {
    if (!next(&p) || !next(&a) || !next(&z) || p < 0 || p >= v.parts) return std::nullopt;
    v.cross[static_cast<int>(p)] = {static_cast<int>(a), static_cast<int>(z)};
  }
  if (!next(&count) || count < 0) return std::nullopt;
  for (long i = 0, r = 0; i < count; ++i) {
    if (!next(&r) || r < 0) return std::nullopt;
    v.dials.insert(static_cast<int>(r));
  }
  if (at != n.size()) return std::nullopt;
  return v;
}

}  // namespace

std::string EncodeRingPlan(const RingPlan& plan) {
  std::string out = std::to_string(plan.nonce) + ";" + std::to_string(plan.group) + ";";
  for (const auto& [rank, addr] : plan.identities) {
    if (out.back() != ';') out += ",";
    out += std::to_string(rank) + "=" + addr;
  }
  if (plan.layout) {
    out += ";";
    for (long x : ViewNumbers(*plan.layout)) out += (out.back() == ';' ? "" : ".") + std::to_string(x);
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
  const size_t c = text.find(';', b + 1), items_end = c == std::string::npos ? text.size() : c;
  for (size_t at = b + 1; at < items_end;) {
    size_t comma = text.find(',', at);
    if (comma == std::string::npos || comma > items_end) comma = items_end;
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
  if (c == std::string::npos) return plan;
  std::vector<long> numbers;
  for (size_t at = c + 1; at <= text.size();) {
    const long x = std::strtol(text.c_str() + at, &end, 10);
    if (end == text.c_str() + at || (*end != '.' && *end != '\0')) return bad("the layout is not numbers joined by '.'");
    numbers.push_back(x);
    at = static_cast<size_t>(end - text.c_str()) + 1;
  }
  plan.layout = ViewFrom(numbers);
  if (!plan.layout) return bad("the layout is not a rank's view of one");
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
