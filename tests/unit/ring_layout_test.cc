// The explicit two-level layout (common/ring_layout.h's RingLayout): what a
// narrowing, a join and a replacement change in who links to whom. The
// rings themselves run on real sockets in ring_test.cc.
#include "common/ring_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace bulwark {
namespace {

// What one change did to a survivor: the links it holds that it did not
// hold before (a ring forms them anew, dialled or accepted), and of those
// the ones it dials. `old_of[r]`: rank r's rank before the change, -1 for
// a joiner.
struct NewLinks {
  int made = 0, dialled = 0;
};
std::vector<NewLinks> Count(const RingLayout& before, const RingLayout& after, const std::vector<int>& old_of) {
  const std::vector<RankRing> was = ViewsOf(before), now = ViewsOf(after);
  std::vector<NewLinks> out(after.world());
  for (int r = 0; r < after.world(); ++r) {
    const std::set<int> had = old_of[r] < 0 ? std::set<int>{} : was[old_of[r]].Peers();
    for (int q : now[r].Peers()) {
      if (old_of[q] >= 0 && had.count(old_of[q]) != 0) continue;
      ++out[r].made;
      out[r].dialled += now[r].dials.count(q) != 0 ? 1 : 0;
    }
  }
  return out;
}

std::vector<int> SurvivorsOf(int W, int lost) {
  std::vector<int> old_of;
  for (int r = 0; r < W; ++r) {
    if (r != lost) old_of.push_back(r);
  }
  return old_of;
}

// Every rank's view of the default layout is TwoLevel's: the rings that
// ring.cc formed before layouts were explicit, so nothing changes for a
// generation the controller did not narrow.
TEST(RingLayout, TheDefaultLayoutIsTwoLevelsAsItWas) {
  for (int W = 1; W <= 80; ++W) {
    for (int G = 0; G <= 12; ++G) {
      const TwoLevel T = TwoLevel::For(W, G);
      const RingLayout L = RingLayout::Default(W, G);
      ASSERT_TRUE(L.Check().ok()) << L.Check().ToString();
      ASSERT_EQ(L.flat(), T.flat()) << "W=" << W << " G=" << G;
      const std::vector<RankRing> views = ViewsOf(L);
      for (int r = 0; r < W && !T.flat(); ++r) {
        const RingNeighbours n = NeighboursOf(T, r);
        const int g = T.GroupOf(r);
        EXPECT_EQ(views[r].group_pred, n.group_pred);
        EXPECT_EQ(views[r].group_succ, n.group_succ);
        EXPECT_EQ(views[r].cross, n.cross) << "W=" << W << " G=" << G << " rank " << r;
        ASSERT_EQ(views[r].size, T.Size(g));
        for (int pos = 0; pos < T.Size(g); ++pos) EXPECT_EQ(views[r].chunks[pos], T.PartsOf(g, pos));
        EXPECT_EQ(views[r].parts, T.G);
        EXPECT_EQ(views[r].groups, T.K);
      }
    }
  }
}

// Issue 35's narrowing at W = 32 and 64 (groups of ceil(sqrt(W))), each
// rank lost in turn: the groups keep their members, every part has one
// owner in each group, and no survivor dials more than one new link (the
// heir, which takes the lost rank's parts, dials none and accepts its new
// neighbours). Cut anew by TwoLevel::For(W - 1), a survivor made up to 3.
TEST(RingLayout, ANarrowingInTwoLevelsDialsAtMostOneNewLinkASurvivor) {
  for (const int W : {16, 32, 64}) {
    const RingLayout before = RingLayout::Default(W, 0);
    ASSERT_FALSE(before.flat());
    int worst_recut = 0, worst_made = 0;
    for (int lost = 0; lost < W; ++lost) {
      SCOPED_TRACE("W=" + std::to_string(W) + " lost " + std::to_string(lost));
      const RingLayout after = before.Without(lost);
      ASSERT_TRUE(after.Check().ok()) << after.Check().ToString();
      ASSERT_EQ(after.world(), W - 1);
      ASSERT_EQ(after.groups(), before.groups());
      const std::vector<int> old_of = SurvivorsOf(W, lost);
      int heirs = 0;
      for (int r = 0; r < W - 1; ++r) {
        EXPECT_EQ(after.group[r], before.group[old_of[r]]) << "rank " << r << " changed group";
        if (after.owns[r] != before.owns[old_of[r]]) {
          ++heirs;
          EXPECT_EQ(after.group[r], before.group[lost]);
          const auto [b, e] = before.owns[lost];
          EXPECT_TRUE(after.owns[r].first == b || after.owns[r].second == e) << "the heir took the lost parts";
        }
      }
      EXPECT_EQ(heirs, 1);
      for (const NewLinks& n : Count(before, after, old_of)) {
        EXPECT_LE(n.dialled, 1);
        worst_made = std::max(worst_made, n.made);
      }
      for (const NewLinks& n : Count(before, RingLayout::Default(W - 1, 0), old_of)) {
        worst_recut = std::max(worst_recut, n.made);
      }
    }
    // The heir accepts its new group neighbour and the lost parts' owners
    // in the two groups beside (two each at most: sizes differ by one).
    EXPECT_LE(worst_made, 5);
    if (W >= 32) {
      EXPECT_GE(worst_recut, 2) << "TwoLevel::For(W - 1) moves the boundaries (why RingLayout exists)";
    }
  }
}

// Narrowings one after another, down to groups of one that vanish, and
// joins in between: after each, the layout is whole and no survivor dials
// more than one new link; a joiner dials none (everyone dials it).
TEST(RingLayout, NarrowingsAndJoinsOneAfterAnotherKeepEveryPartOwnedOnce) {
  std::mt19937 rng(35);
  for (int trial = 0; trial < 20; ++trial) {
    RingLayout L = RingLayout::Default(40, 5);
    for (int change = 0; change < 60 && L.world() > 2; ++change) {
      SCOPED_TRACE("trial " + std::to_string(trial) + " change " + std::to_string(change));
      std::vector<int> old_of;
      RingLayout next;
      if (rng() % 3 == 0) {
        next = L.WithJoiner();
        for (int r = 0; r < L.world(); ++r) old_of.push_back(r);
        old_of.push_back(-1);
      } else {
        const int lost = static_cast<int>(rng() % L.world());
        next = L.Without(lost);
        old_of = SurvivorsOf(L.world(), lost);
      }
      ASSERT_TRUE(next.Check().ok()) << next.Check().ToString();
      const std::vector<NewLinks> n = Count(L, next, old_of);
      for (int r = 0; r < next.world(); ++r) {
        if (old_of[r] >= 0) { EXPECT_LE(n[r].dialled, 1) << "rank " << r; }
        else EXPECT_EQ(n[r].dialled, 0) << "the joiner";
      }
      L = next;
    }
  }
}

// A replacement (a standby's process takes the lost rank) changes no
// layout, and a flat ring narrows as a flat ring: its lost member's two
// neighbours link, one dialling.
TEST(RingLayout, AFlatRingNarrowsToItsLostMembersTwoNeighbours) {
  const RingLayout before = RingLayout::Default(12, 0);
  ASSERT_TRUE(before.flat());
  const RingLayout after = before.Without(5);
  EXPECT_TRUE(after.flat());
  const std::vector<NewLinks> n = Count(before, after, SurvivorsOf(12, 5));
  for (int r = 0; r < 11; ++r) {
    EXPECT_EQ(n[r].made, r == 4 || r == 5 ? 1 : 0) << "rank " << r;
    EXPECT_LE(n[r].dialled, 1);
  }
  EXPECT_EQ(n[4].dialled + n[5].dialled, 1);
}

// The view travels in the plan's text and back, and a plan with no view
// still decodes (a store generation's, or an older controller's).
TEST(RingLayout, ARanksViewTravelsInItsPlan) {
  const RingLayout L = RingLayout::Default(64, 0).Without(17).Without(40);
  const std::vector<RankRing> views = ViewsOf(L);
  for (int r = 0; r < L.world(); ++r) {
    const RingPlan plan = PlanFor(r, views[r], L.world(), 99, [](int q) { return "10.0.0.1:" + std::to_string(20000 + q); });
    EXPECT_EQ(plan.identities.count(r), 0u);
    for (int q : views[r].Peers()) EXPECT_EQ(plan.identities.count(q), 1u);
    EXPECT_EQ(plan.identities.count((r + 1) % L.world()), 1u) << "the flat successor: ZeRO-1's backup peer";
    auto back = DecodeRingPlan(EncodeRingPlan(plan));
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->identities, plan.identities);
    ASSERT_TRUE(back->layout.has_value());
    EXPECT_EQ(back->layout->chunks, views[r].chunks);
    EXPECT_EQ(back->layout->cross, views[r].cross);
    EXPECT_EQ(back->layout->dials, views[r].dials);
    EXPECT_EQ(back->layout->group_succ, views[r].group_succ);
    EXPECT_EQ(ViewOf(L, r).cross, views[r].cross);
  }
  auto bare = DecodeRingPlan("7;0;1=10.0.0.1:5");
  ASSERT_TRUE(bare.ok());
  EXPECT_FALSE(bare->layout.has_value());
  EXPECT_FALSE(DecodeRingPlan("7;0;1=10.0.0.1:5;1.2.x").ok());
  EXPECT_FALSE(DecodeRingPlan("7;0;1=10.0.0.1:5;6.4.9.1.0.0.0.0.0.0").ok()) << "group 9 of 4";
}

}  // namespace
}  // namespace bulwark
