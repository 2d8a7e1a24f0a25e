// Which rack each machine of `bulwark up --racks K` goes to
// (cluster/local/netns.h, RacksOf): the job's machines in equal blocks,
// rack by rack, so that a pipeline replica or a block of replicas shares a
// switch, and the standbys one to a rack in turn, so that a rack's loss
// leaves standbys under the other switches. Pure.
#include <gtest/gtest.h>

#include <vector>

#include "cluster/local/netns.h"

namespace bulwark::cluster {
namespace {

TEST(RacksOf, TheJobsMachinesInBlocksAndTheStandbysOneARackInTurn) {
  // The racks cluster test: r0 = m01 m02 m05, r1 = m03 m04 m06.
  EXPECT_EQ(RacksOf(4, 2, 2), (std::vector<int>{0, 0, 1, 1, 0, 1}));
  // Blocks as even as the count allows; more standbys than racks go round.
  EXPECT_EQ(RacksOf(5, 3, 2), (std::vector<int>{0, 0, 0, 1, 1, 0, 1, 0}));
  EXPECT_EQ(RacksOf(3, 0, 3), (std::vector<int>{0, 1, 2}));
  // Fewer standbys than racks: the first racks hold them.
  EXPECT_EQ(RacksOf(6, 1, 3), (std::vector<int>{0, 0, 1, 1, 2, 2, 0}));
}

TEST(RacksOf, NoRacksIsNoRackForAnyMachine) {
  EXPECT_TRUE(RacksOf(4, 2, 0).empty());
  EXPECT_EQ(RackName(0), "r0");
  EXPECT_EQ(RackName(12), "r12");
}

}  // namespace
}  // namespace bulwark::cluster
