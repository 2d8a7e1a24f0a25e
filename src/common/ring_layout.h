// How a ring communicator lays out its ranks and cuts its buffers: pure
// arithmetic that the trainer's ring (trainer/comm/ring.h) runs by and that a
// controller handing each rank its neighbours (a RingPlan) must agree
// with, so it lives here, outside the libtorch code.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace bulwark {

// Part `i` of `parts` of a flat buffer of `n` elements: [n i / P, n (i+1) / P).
// Every split of a flat buffer (the ZeRO-1 optimizer's range, the in-memory
// checkpoint's shards, the all-gathers) follows this one rule, so any width
// splits any length and the parts differ by at most one element.
struct Span {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
inline Span ChunkOf(int64_t n, int parts, int i) { return {n * i / parts, n * (i + 1) / parts}; }

// A two-level all-reduce's layout: W ranks in K groups of consecutive ranks
// (sizes differ by one at most, none above G), the buffer cut into P = G
// parts. A group's ring reduce-scatters the buffer (member `pos` ends with
// the group's sum of parts PartsOf(g, pos)); each part's owners, one per
// group, all-reduce it on a ring across the groups; the group's ring
// all-gathers the result. A collective's latency is 2(G - 1) + 2(K - 1)
// hops, not 2(W - 1), and its bytes are the flat ring's on each link. The
// sum is the exact one either way (elastic.h): integers add in any order.
struct TwoLevel {
  int W = 1, G = 1, K = 1;
  static TwoLevel For(int world, int requested);
  bool flat() const { return K == 1 || G == 1; }
  int GroupOf(int rank) const;
  int First(int g) const { return static_cast<int>(static_cast<int64_t>(W) * g / K); }
  int Size(int g) const { return First(g + 1) - First(g); }
  // Parts [first, second) that member `pos` of group `g` holds summed
  // after the group's reduce-scatter.
  std::pair<int, int> PartsOf(int g, int pos) const;
  int OwnerOf(int g, int part) const;  // the rank that holds `part` in group g
};

// The layout's rings through `rank`, as ranks: its group's, and for each
// part it holds, that part's ring across the groups.
struct RingNeighbours {
  int group_pred = -1, group_succ = -1;
  std::map<int, std::pair<int, int>> cross;  // part -> pred, succ
};
RingNeighbours NeighboursOf(const TwoLevel& L, int rank);

// A two-level layout held explicitly, so that it can outlive a membership
// change. TwoLevel is a function of (W, G): removing one rank and
// renumbering moves every later group's boundary and every part's owner,
// and a survivor re-linked up to 3 peers at W = 32. Here a narrowing
// (Without) shrinks only the lost rank's group: the other groups keep
// their members and every member keeps its parts, and the lost rank's
// parts go to its heir, a member of its group whose parts adjoin them (so
// a member's parts stay consecutive). The heir is the only rank that joins
// rings it was not in; every new link of the change has it or the lost
// rank's two group neighbours at one end. A new link is dialled from the
// lower tier to the higher (then from the lower rank), and the heir takes
// a tier above every other: so every survivor dials at most one new link
// (its new group neighbour, or the heir), and the heir dials none.
// The controller keeps the layout in the job's placement and sends each
// rank its view (RankRing) in its plan.
struct RingLayout {
  int parts = 1;                          // P: each group's members hold all P parts between them
  std::vector<int> group;                 // rank -> its group; a group's ring is its members in rank order
  std::vector<std::pair<int, int>> owns;  // rank -> parts [first, second) it ends its group's reduce-scatter with
  std::vector<int> tier;                  // rank -> who dials a new link (see above)
  // TwoLevel::For(world, requested)'s layout, as it always was.
  static RingLayout Default(int world, int requested);
  int world() const { return static_cast<int>(group.size()); }
  int groups() const;
  bool flat() const { return groups() <= 1; }  // one ring of all, cut in W chunks
  // Without `rank` (the ranks above it renumbered down by one).
  RingLayout Without(int rank) const;
  // With one rank more, numbered last: it joins the smallest group (a new
  // one when every group holds P) and takes half the parts of that group's
  // member that holds the most, with the top tier, so it dials no one.
  RingLayout WithJoiner() const;
  // Every group's parts owned once, consecutive groups, ranges in order.
  Status Check() const;

 private:
  void CloseCrossRings(int g);
};

// What one rank needs of a RingLayout to run its all-reduce: O(G), not
// O(W). `chunks[pos]` are the parts its group's member `pos` holds; on each
// part's cross ring the rank's place is its group's index.
struct RankRing {
  int parts = 1, groups = 1, group = 0, size = 1, pos = 0;
  int group_pred = -1, group_succ = -1;
  std::vector<std::pair<int, int>> chunks;
  std::map<int, std::pair<int, int>> cross;  // part -> pred, succ on its ring across the groups
  std::set<int> dials;                       // the ring peers this rank dials when its link to them is new
  bool flat() const { return groups <= 1; }
  std::set<int> Peers() const;  // every rank it links to, itself left out
};
RankRing ViewOf(const RingLayout& layout, int rank);
// Every rank's view at once, in O(W + K P) and the views' own size: what
// the controller computes at a generation of W ranks.
std::vector<RankRing> ViewsOf(const RingLayout& layout);

// The ranks a rank links to in a world of `world` under the layout
// TwoLevel::For(world, group): its flat ring's neighbours, and in two
// levels its group's ring's and each of its parts' cross rings'.
std::set<int> LinkedRanks(int rank, int world, int group);

// What a rank needs to form a generation without a store: the generation's
// nonce, the layout's group size (TwoLevel::For's `requested`), and the ring
// addresses ("addr:port") of the ranks it links to, as a controller that
// knows the membership hands each rank in its start command. Nothing in it
// grows with W: at most 8 addresses (2 on a flat ring).
// With `layout` set, the rank runs its all-reduce by that view (the
// controller's RingLayout) instead of TwoLevel::For(W, group).
struct RingPlan {
  uint64_t nonce = 0;
  int group = 0;
  std::map<int, std::string> identities;  // rank -> ring address
  std::optional<RankRing> layout;
};

// Rank `rank`'s plan in a world of `world`: `address(r)` names rank r's ring
// listener (its machine's address and its slot's port).
RingPlan PlanFor(int rank, int world, int group, uint64_t nonce, const std::function<std::string(int)>& address);
// The same under an explicit layout, from its view of it: the addresses of
// its ring peers and of its flat ring's neighbours (the point-to-point
// peers of healing and ZeRO-1's backups), and the view when in two levels.
RingPlan PlanFor(int rank, const RankRing& view, int world, uint64_t nonce,
                 const std::function<std::string(int)>& address);

// A machine's ring slots: its agent reserves kRingSlotPorts ports from
// `ring_addr`'s ("host:port", RegisterRequest.ring_addr), and local rank
// `local` listens for ring `ring` (0 the world's, 1 a pipeline stage's) at
// port + ring x kRingSlotPorts / 2 + local. The agent and the controller's
// plans both address slots by this one rule. "" when `ring_addr` is not
// host:port or the slot is out of range.
constexpr int kRingSlotPorts = 16;
std::string RingSlotAddress(const std::string& ring_addr, int local, int ring);

// "nonce;group;rank=addr:port,rank=addr:port[;view]": one word, no spaces,
// so it travels in an environment variable and in a rank link's ASSIGN
// line. The view, when there is one, is its numbers joined by '.'.
std::string EncodeRingPlan(const RingPlan& plan);
Result<RingPlan> DecodeRingPlan(const std::string& text);

// A generation's nonce: distinct for every generation of a job, the same
// on every rank of one, so frames a failed generation left on a kept link
// are skipped by the next (trainer/comm/ring.h).
uint64_t RingNonce(const std::string& job, int64_t generation);

}  // namespace bulwark
