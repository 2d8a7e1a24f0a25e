// The agent's choice of process per rank at a restart (agent/handoff.h), and
// the ASSIGN message that hands a rank to a running process.
#include "agent/handoff.h"

#include <gtest/gtest.h>

#include "rank_client/rank_link.h"

namespace bulwark::agent {
namespace {

const std::string kJob = JobIdentity({"bulwark-train", "--config", "tiny"}, {{"OMP_NUM_THREADS", "1"}});

TEST(Handoff, AWaitingSurvivorRejoinsAndTheCrashedRankTakesASpare) {
  std::map<int, RunningProcess> live = {{0, {100, kJob, true}}};
  std::vector<RunningProcess> spares = {{200, kJob, true}};
  HandoffPlan p = PlanHandoff({0, 1}, kJob, live, spares);
  ASSERT_EQ(p.ranks.size(), 2u);
  EXPECT_EQ(p.ranks[0].path, HandoffPath::kRejoin);
  EXPECT_EQ(p.ranks[0].pid, 100);
  EXPECT_EQ(p.ranks[1].path, HandoffPath::kPrespawned);
  EXPECT_EQ(p.ranks[1].pid, 200);
  EXPECT_TRUE(p.stop.empty());
}

TEST(Handoff, ARankThatDoesNotWaitOrRunsAnotherJobIsStoppedAndReplaced) {
  const std::string other = JobIdentity({"bulwark-train", "--config", "small"}, {{"OMP_NUM_THREADS", "1"}});
  std::map<int, RunningProcess> live = {{0, {100, kJob, false}}, {1, {101, other, true}}};
  std::vector<RunningProcess> spares = {{200, kJob, false}, {201, other, true}};
  HandoffPlan p = PlanHandoff({0, 1}, kJob, live, spares);
  EXPECT_EQ(p.ranks[0].path, HandoffPath::kCold);
  EXPECT_EQ(p.ranks[1].path, HandoffPath::kCold);  // the spare is not ready, the other is another job's
  EXPECT_EQ(p.stop, std::vector<int>({0, 1}));
}

TEST(Handoff, AWaitingProcessTakesAnotherRankWhenItsOwnIsNotWanted) {
  std::map<int, RunningProcess> live = {{3, {100, kJob, true}}, {4, {101, kJob, true}}};
  HandoffPlan p = PlanHandoff({4, 5}, kJob, live, {});
  EXPECT_EQ(p.ranks[0].pid, 101);  // its own rank first
  EXPECT_EQ(p.ranks[1].pid, 100);
  EXPECT_EQ(p.ranks[1].path, HandoffPath::kRejoin);
  EXPECT_TRUE(p.stop.empty());
}

TEST(Handoff, EachSpareTakesOneRank) {
  std::vector<RunningProcess> spares = {{200, kJob, true}};
  HandoffPlan p = PlanHandoff({0, 1}, kJob, {}, spares);
  EXPECT_EQ(p.ranks[0].path, HandoffPath::kPrespawned);
  EXPECT_EQ(p.ranks[1].path, HandoffPath::kCold);
}

TEST(Handoff, TheIdentityIgnoresWhatAGenerationSetsPerRank) {
  EXPECT_EQ(JobIdentity({"t"}, {{"A", "1"}, {"RANK", "0"}, {"MASTER_PORT", "2000"}, {"BULWARK_SHARD_BACKUP_OF", "1"}}),
            JobIdentity({"t"}, {{"A", "1"}, {"RANK", "3"}, {"MASTER_PORT", "2001"}}));
  EXPECT_NE(JobIdentity({"t"}, {{"A", "1"}}), JobIdentity({"t"}, {{"A", "2"}}));
  EXPECT_NE(JobIdentity({"t", "x"}, {}), JobIdentity({"tx"}, {}));
}

TEST(Handoff, AssignmentsRoundTripAndBadOnesAreRefused) {
  rank_client::RankAssignment a;
  a.generation = 7;
  a.rank = 1;
  a.local_rank = 0;
  a.world_size = 2;
  a.local_world_size = 1;
  a.master_addr = "127.0.0.1";
  a.master_port = 20123;
  a.backup_of = 0;
  a.log_path = "/tmp/x/ranks/rank-1.log";
  auto b = rank_client::RankAssignment::Parse(a.Format());
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->Format(), a.Format());
  EXPECT_FALSE(rank_client::RankAssignment::Parse("ASSIGN 7 2 0 2 1 127.0.0.1 20123 -1 /x").ok());  // rank >= world
  EXPECT_FALSE(rank_client::RankAssignment::Parse("ASSIGN 7 1 0 2 1 127.0.0.1 0 -1 /x").ok());      // no port
  EXPECT_FALSE(rank_client::RankAssignment::Parse("ASSIGN 7 1 0 2").ok());
}

}  // namespace
}  // namespace bulwark::agent
