// The agent's choice of process per rank at a restart (agent/handoff.h), and
// the ASSIGN message that hands a rank to a running process.
#include "agent/handoff.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

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

// The agent's end of a rank link, by hand: a SEQPACKET listener at `path`.
int ListenSeqpacket(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ::unlink(path.c_str());
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 4) != 0) return -1;
  return fd;
}

// Polls until `done` or 5 s pass: the link reads without waiting.
template <typename F>
bool PollUntil(F done) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    ::usleep(1000);
  }
  return true;
}

// A grow spliced in between steps (rank_link.h: SPLICE): the next
// generation reaches a training rank among its injections, longer than
// one (a log path and a ring plan), is held until taken, and is dropped by
// a yield or an abort, which speak of a later generation.
TEST(Handoff, ASpliceReachesATrainingRankIsHeldAndALaterYieldDropsIt) {
  const std::string path = "/tmp/handoff-test-" + std::to_string(::getpid()) + ".sock";
  const int listener = ListenSeqpacket(path);
  ASSERT_GE(listener, 0) << std::strerror(errno);
  ::setenv(rank_client::kRankSocketEnv, path.c_str(), 1);
  auto link = rank_client::RankLink::FromEnv(0);
  ASSERT_TRUE(link.ok() && *link) << link.status().ToString();
  const int agent = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  ASSERT_GE(agent, 0);
  auto say = [&](const std::string& text) { ASSERT_EQ(::send(agent, text.data(), text.size(), 0), static_cast<ssize_t>(text.size())); };

  rank_client::RankAssignment a;
  a.generation = 4;
  a.rank = 2;
  a.world_size = 3;
  a.master_addr = "10.0.0.1";
  a.master_port = 29500;
  a.log_path = "/tmp/" + std::string(300, 'x') + "/rank-2.log";
  a.ring_addr = "10.0.0.3:61002";
  a.ring_plan = "77;0;1=10.0.0.2:61001,0=10.0.0.1:61000";
  say(a.Format("SPLICE"));
  say("INJECT nan");
  std::string inject;
  ASSERT_TRUE(PollUntil([&] { return !(inject = (*link)->PollInject().value_or("")).empty(); }));
  EXPECT_EQ(inject, "nan");
  ASSERT_TRUE((*link)->splice().has_value());
  EXPECT_EQ((*link)->splice()->Format(), a.Format());

  say("INJECT yield");
  ASSERT_TRUE(PollUntil([&] { return (*link)->PollInject().value_or("") == "yield"; }));
  EXPECT_FALSE((*link)->splice().has_value()) << "a yield is about a later generation than the splice";

  say(a.Format("SPLICE"));
  ASSERT_TRUE(PollUntil([&] {
    (void)(*link)->PollInject();
    return (*link)->splice().has_value();
  }));
  auto taken = (*link)->TakeSplice();
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->rank, 2);
  EXPECT_FALSE((*link)->splice().has_value());
  ::close(agent);
  ::close(listener);
  ::unlink(path.c_str());
}

}  // namespace
}  // namespace bulwark::agent
