// Leadership over a real etcd member (leader.h): one controller leads, a
// deposed one is refused by etcd itself, and an etcd that goes away ends
// the term before anyone else can start one.
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "plane/journal_etcd.h"
#include "plane/leader.h"
#include "support/etcd_server.h"

namespace bulwark::plane {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kPrefix = "/bulwark/lead/";

double SecondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

class LeaderEtcd : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    etcd_ = testing::EtcdServer::Start(&why);
    ASSERT_NE(etcd_, nullptr) << why;
    auto c = EtcdClient::Connect(etcd_->endpoint(), std::chrono::milliseconds(500));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    client_ = std::move(*c);
  }
  std::unique_ptr<Leadership> Lead(const std::string& id, int64_t ttl_s) {
    auto l = Leadership::Campaign(*client_, kPrefix, id, ttl_s, never_, [](const std::string&) {});
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    return l.ok() ? std::move(*l) : nullptr;
  }
  // Polls until `cond` or `seconds` pass.
  template <typename F>
  static bool Within(double seconds, F cond) {
    const auto start = Clock::now();
    while (SecondsSince(start) < seconds) {
      if (cond()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return cond();
  }

  const std::atomic<bool> never_{false};
  std::unique_ptr<testing::EtcdServer> etcd_;
  std::shared_ptr<EtcdClient> client_;
};

TEST_F(LeaderEtcd, DeposedLeaderCannotWriteEvenBeforeItNotices) {
  std::unique_ptr<Leadership> a = Lead("a", 2);
  ASSERT_NE(a, nullptr);
  auto ja = EtcdJournal::Open(client_, kPrefix, a->term(), /*create=*/true);
  ASSERT_TRUE(ja.ok()) << ja.status().ToString();
  ASSERT_TRUE((*ja)->Append("demo", 1, "{\"by\":\"a\"}").ok());
  // A is cut off: it stops renewing, its lease runs out, b takes over.
  a->Abandon();
  const auto cut = Clock::now();
  std::unique_ptr<Leadership> b = Lead("b", 2);
  ASSERT_NE(b, nullptr);
  std::printf("[ leader] b led %.2f s after a stopped renewing a 2 s lease\n", SecondsSince(cut));
  EXPECT_NE(b->term().revision, a->term().revision);
  EXPECT_TRUE(a->lost()) << "a's renew deadline (2/3 of the TTL) passed before its lease expired";
  Status refused = (*ja)->Append("demo", 2, "{\"by\":\"a\"}");
  EXPECT_EQ(refused.code(), Status::Code::kFailedPrecondition) << refused.ToString();
  EXPECT_NE(refused.message().find("term " + std::to_string(a->term().revision)), std::string::npos)
      << refused.message();
  EXPECT_EQ((*ja)->PutSnapshot("ledger", "{}").code(), Status::Code::kFailedPrecondition);
  auto jb = EtcdJournal::Open(client_, kPrefix, b->term(), /*create=*/false);
  ASSERT_TRUE(jb.ok()) << jb.status().ToString();
  ASSERT_TRUE((*jb)->Append("demo", 3, "{\"by\":\"b\"}").ok());
  auto rows = (*jb)->Journal("demo");
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].json, "{\"by\":\"a\"}");
  EXPECT_EQ((*rows)[1].json, "{\"by\":\"b\"}");
}

// A write etcd never answered (etcd frozen) is kept; sent again once etcd
// answers, it is refused by the term compare when another controller has
// led since, and the refusal names the new holder.
TEST_F(LeaderEtcd, AnUnansweredWriteSentAgainAfterItsTermIsRefusedByEtcd) {
  std::unique_ptr<Leadership> a = Lead("a", 2);
  ASSERT_NE(a, nullptr);
  auto unsettled = std::make_shared<UnsettledWrites>();
  auto ja = EtcdJournal::Open(client_, kPrefix, a->term(), /*create=*/true, nullptr, unsettled);
  ASSERT_TRUE(ja.ok()) << ja.status().ToString();
  ASSERT_TRUE((*ja)->Append("demo", 1, "{\"by\":\"a\"}").ok());
  etcd_->Freeze();
  EXPECT_EQ((*ja)->Append("demo", 2, "{\"by\":\"a, unanswered\"}").code(), Status::Code::kUnavailable);
  etcd_->Thaw();
  a->Abandon();
  std::unique_ptr<Leadership> b = Lead("b", 2);
  ASSERT_NE(b, nullptr);
  std::vector<UnsettledWrites::Outcome> settled = unsettled->Settle(*client_, never_);
  ASSERT_EQ(settled.size(), 1u);
  EXPECT_TRUE(settled[0].refused) << settled[0].detail;
  EXPECT_EQ(settled[0].term, a->term().revision);
  EXPECT_NE(settled[0].detail.find("b (term " + std::to_string(b->term().revision) + ")"), std::string::npos)
      << settled[0].detail;
  EXPECT_TRUE(unsettled->Settle(*client_, never_).empty()) << "settled once";
  // The first send may have landed after all: a frozen etcd reads it when
  // thawed, while a's term still held. Then it precedes b's term, so b's
  // replay saw it; it never lands inside b's term.
  const std::string row = std::string(kPrefix) + "journal/demo/0000000000000002";
  auto landed = client_->Range(row);
  ASSERT_TRUE(landed.ok()) << landed.status().ToString();
  if (!landed->empty()) {
    EXPECT_LT((*landed)[0].mod_revision, b->term().revision);
  }
  std::printf("[ leader] the unanswered first send %s\n", landed->empty() ? "never landed" : "landed in a's term");
}

// While the term still holds, the same write sent again is applied; a later
// write of the term that lands clears what is kept (it would be out of order).
TEST_F(LeaderEtcd, AnUnansweredWriteSentAgainInItsTermLandsAndALaterWriteClearsIt) {
  std::unique_ptr<Leadership> a = Lead("a", 5);
  ASSERT_NE(a, nullptr);
  auto unsettled = std::make_shared<UnsettledWrites>();
  auto ja = EtcdJournal::Open(client_, kPrefix, a->term(), /*create=*/true, nullptr, unsettled);
  ASSERT_TRUE(ja.ok()) << ja.status().ToString();
  etcd_->Freeze();
  EXPECT_EQ((*ja)->PutSnapshot("ledger", "{\"n\":1}").code(), Status::Code::kUnavailable);
  etcd_->Thaw();
  std::vector<UnsettledWrites::Outcome> settled = unsettled->Settle(*client_, never_);
  ASSERT_EQ(settled.size(), 1u);
  EXPECT_FALSE(settled[0].refused) << settled[0].detail;
  auto snap = (*ja)->Snapshot("ledger");
  ASSERT_TRUE(snap.ok() && snap->has_value());
  EXPECT_EQ(**snap, "{\"n\":1}");
  etcd_->Freeze();
  EXPECT_EQ((*ja)->PutSnapshot("ledger", "{\"n\":2}").code(), Status::Code::kUnavailable);
  etcd_->Thaw();
  ASSERT_TRUE((*ja)->PutSnapshot("ledger", "{\"n\":3}").ok());
  EXPECT_TRUE(unsettled->Settle(*client_, never_).empty());
}

// A standby's mirror, started before the leader wrote anything, shows every
// row the leader got through by the new term's revision, and then the new
// leader's own writes, without a read from etcd (the watch alone fills it).
TEST_F(LeaderEtcd, AStandbysMirrorHoldsTheDeposedLeadersRowsAtTheNewTermAndThenItsOwn) {
  auto mirror = EtcdMirror::Start(client_, kPrefix);
  ASSERT_TRUE(mirror.ok()) << mirror.status().ToString();
  std::unique_ptr<Leadership> a = Lead("a", 2);
  ASSERT_NE(a, nullptr);
  auto ja = EtcdJournal::Open(client_, kPrefix, a->term(), /*create=*/true);
  ASSERT_TRUE(ja.ok()) << ja.status().ToString();
  for (int i = 1; i <= 50; ++i) ASSERT_TRUE((*ja)->Append("demo", i, "{\"n\":" + std::to_string(i) + "}").ok());
  ASSERT_TRUE((*ja)->DropJournalRows("demo", {1, 2, 3}).ok());
  a->Abandon();
  std::unique_ptr<Leadership> b = Lead("b", 2);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE((*mirror)->WaitFor(b->term().revision, std::chrono::milliseconds(2000)));
  const std::string dir = std::string(kPrefix) + "journal/demo/";
  std::vector<EtcdKv> rows = (*mirror)->Range(dir, PrefixEnd(dir));
  ASSERT_EQ(rows.size(), 47u);
  EXPECT_EQ(rows.front().key, dir + "0000000000000004");
  EXPECT_EQ(rows.back().key, dir + "0000000000000050");
  EXPECT_GE((*mirror)->applied(), 50 + 3) << "the rows came through the watch, not a read";
  std::shared_ptr<const EtcdMirror> shared = std::move(*mirror);
  auto jb = EtcdJournal::Open(client_, kPrefix, b->term(), /*create=*/false, shared);
  ASSERT_TRUE(jb.ok()) << jb.status().ToString();
  ASSERT_TRUE((*jb)->Append("demo", 51, "{\"by\":\"b\"}").ok());
  auto journal = (*jb)->Journal("demo");
  ASSERT_TRUE(journal.ok()) << journal.status().ToString();
  ASSERT_EQ(journal->size(), 48u);
  EXPECT_EQ(journal->back().json, "{\"by\":\"b\"}") << "b reads its own write at once";
}

TEST_F(LeaderEtcd, FollowerTakesOverAtOnceWhenTheLeaderResigns) {
  std::unique_ptr<Leadership> a = Lead("a", 5);
  ASSERT_NE(a, nullptr);
  auto follower = std::async(std::launch::async, [&] { return Lead("b", 5); });
  EXPECT_EQ(follower.wait_for(std::chrono::milliseconds(1500)), std::future_status::timeout) << "a still leads";
  const auto resigned = Clock::now();
  a.reset();  // revokes the lease
  std::unique_ptr<Leadership> b = follower.get();
  ASSERT_NE(b, nullptr);
  const double took = SecondsSince(resigned);
  std::printf("[ leader] b led %.3f s after a resigned\n", took);
  EXPECT_LT(took, 2.0) << "the follower watches the key; it does not wait for a 5 s lease";
}

TEST_F(LeaderEtcd, UnreachableEtcdAtStartIsOneLineNamingTheEndpoint) {
  const std::string nowhere = "127.0.0.1:" + std::to_string(testing::FreePort());
  auto c = EtcdClient::Connect(nowhere, std::chrono::milliseconds(500));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Status::Code::kUnavailable);
  EXPECT_NE(c.status().message().find(nowhere), std::string::npos) << c.status().message();
  EXPECT_EQ(c.status().message().find('\n'), std::string::npos) << c.status().message();
}

TEST_F(LeaderEtcd, EtcdLostEndsTheTermAndLeadingResumesWhenItReturns) {
  std::unique_ptr<Leadership> a = Lead("a", 2);
  ASSERT_NE(a, nullptr);
  auto ja = EtcdJournal::Open(client_, kPrefix, a->term(), /*create=*/true);
  ASSERT_TRUE(ja.ok()) << ja.status().ToString();
  etcd_->Freeze();
  const auto frozen = Clock::now();
  EXPECT_TRUE(Within(3.0, [&] { return a->lost(); }));
  std::printf("[ leader] term lost %.2f s after etcd froze (2 s lease)\n", SecondsSince(frozen));
  EXPECT_NE(a->why_lost().find("etcd"), std::string::npos) << a->why_lost();
  EXPECT_FALSE((*ja)->Append("demo", 1, "{}").ok()) << "nothing is journaled while etcd is gone";
  etcd_->Thaw();
  a.reset();
  std::unique_ptr<Leadership> again = Lead("a", 2);
  ASSERT_NE(again, nullptr);
  auto j2 = EtcdJournal::Open(client_, kPrefix, again->term(), /*create=*/false);
  ASSERT_TRUE(j2.ok()) << j2.status().ToString();
  EXPECT_TRUE((*j2)->Append("demo", 2, "{}").ok());
}

}  // namespace
}  // namespace bulwark::plane

namespace bulwark::plane {
namespace {

// Three members; one is killed while a controller leads and appends: the
// other two keep the quorum, the client moves to them, the term holds and
// every append lands. The victim is the member the client talks to first,
// and either leads etcd's raft (its loss costs an election) or follows.
class LeaderEtcdCluster : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(Member, LeaderEtcdCluster, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "raft_leader" : "raft_follower"; });

TEST_P(LeaderEtcdCluster, OneMemberKilledWhileLeadingChangesNothing) {
  std::string why;
  auto etcd = testing::EtcdServer::Start(&why, 3);
  ASSERT_NE(etcd, nullptr) << why;
  auto probe = EtcdClient::Connect(etcd->endpoint(), std::chrono::milliseconds(1000));
  ASSERT_TRUE(probe.ok()) << probe.status().ToString();
  Result<int> raft = (*probe)->RaftLeader();
  ASSERT_TRUE(raft.ok()) << raft.status().ToString();
  const int victim = GetParam() ? *raft : (*raft + 1) % 3;
  // The client talks to the victim first, so it must move off it.
  std::string endpoints = etcd->member_endpoint(victim);
  for (int i = 0; i < 3; ++i) {
    if (i != victim) endpoints += "," + etcd->member_endpoint(i);
  }
  auto c = EtcdClient::Connect(endpoints, std::chrono::milliseconds(1000));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  (*c)->set_retry_for(std::chrono::milliseconds(5000));  // as RunHaController sets it: the lease
  std::shared_ptr<EtcdClient> client = std::move(*c);
  const std::atomic<bool> never{false};
  auto lead = Leadership::Campaign(*client, kPrefix, "a", 5, never, [](const std::string&) {});
  ASSERT_TRUE(lead.ok()) << lead.status().ToString();
  auto j = EtcdJournal::Open(client, kPrefix, (*lead)->term(), true);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  int appended = 0;
  const auto start = Clock::now();
  double slowest = 0;
  while (SecondsSince(start) < 6) {
    if (appended == 20) etcd->KillMember(victim);
    const auto t = Clock::now();
    Status st = (*j)->Append("demo", appended, "{}");
    ASSERT_TRUE(st.ok()) << "append " << appended << ": " << st.ToString();
    slowest = std::max(slowest, SecondsSince(t));
    ++appended;
    ASSERT_FALSE((*lead)->lost()) << (*lead)->why_lost();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  auto rows = (*j)->Journal("demo");
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  EXPECT_EQ(static_cast<int>(rows->size()), appended);
  std::printf("[ leader] %d appends over 6 s with member %d of 3 (%s) killed after 20; slowest %.3f s; "
              "longest renewal gap %.3f s\n",
              appended, victim, GetParam() ? "raft leader" : "raft follower", slowest,
              static_cast<double>((*lead)->LongestRenewalGapMs()) / 1000);
}

}  // namespace
}  // namespace bulwark::plane
