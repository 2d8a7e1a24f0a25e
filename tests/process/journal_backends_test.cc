// The controller's journal, the same specification for both backends
// (journal_store.h): SQLite on the controller's disk and etcd, a real etcd
// member this test starts. The plane is rebuilt from either after the
// controller is gone, and compaction keeps the same state in both.
#include <gtest/gtest.h>

#include "plane/fleet.h"
#include "plane/job_journals.h"
#include "plane/journal_compaction.h"
#include "plane/journal_etcd.h"
#include "plane/plane.h"
#include "plane/store.h"
#include "support/agent_messages.h"
#include "support/plane_commands.h"
#include "support/etcd_server.h"
#include "support/process.h"

namespace bulwark::plane {
namespace {

using nlohmann::json;
using testing::DeviceFailed;
using testing::Launch;
using testing::Reg;
using testing::Report;
using testing::RestoredEvent;
using testing::Step;

// kEtcdMirror: etcd, with every read from a standby's mirror of the prefix
// (journal_etcd_mirror.h): the same specification holds when reads come
// from the watch's copy, including reads right after this term's writes.
enum class Backend { kSqlite, kEtcd, kEtcdMirror };

class JournalBackends : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    path_ = testing::MakeTempDir() + "/c.db";
    if (GetParam() == Backend::kSqlite) return;
    std::string why;
    etcd_ = testing::EtcdServer::Start(&why);
    ASSERT_NE(etcd_, nullptr) << why;
    auto c = EtcdClient::Connect(etcd_->endpoint(), std::chrono::milliseconds(2000));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    client_ = std::move(*c);
    const std::atomic<bool> never{false};
    auto l = Leadership::Campaign(*client_, kPrefix, "c1", 5, never, [](const std::string&) {});
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    leader_ = std::move(*l);
    if (GetParam() != Backend::kEtcdMirror) return;
    auto m = EtcdMirror::Start(client_, kPrefix);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    mirror_ = std::move(*m);
  }

  Result<std::unique_ptr<JournalStore>> Open(bool create) {
    if (GetParam() == Backend::kSqlite) {
      auto s = Store::Open(path_, create);
      if (!s.ok()) return s.status();
      return std::unique_ptr<JournalStore>(std::move(*s));
    }
    auto j = EtcdJournal::Open(client_, kPrefix, leader_->term(), create, mirror_);
    if (!j.ok()) return j.status();
    return std::unique_ptr<JournalStore>(std::move(*j));
  }

  PlaneOptions Options() {
    PlaneOptions o;
    o.db_path = path_;
    if (GetParam() != Backend::kSqlite) o.open_journal = [this](bool create) { return Open(create); };
    return o;
  }
  // A fleet's named jobs' journals beside the main one's.
  std::shared_ptr<const JobJournals> JobJournalsHere() {
    if (GetParam() == Backend::kSqlite) return SqliteJobJournals(path_ + ".jobs");
    return EtcdJobJournals(client_, kPrefix, leader_->term(), nullptr);
  }

  static constexpr const char* kPrefix = "/bulwark/test/";
  std::string path_;
  std::unique_ptr<testing::EtcdServer> etcd_;
  std::shared_ptr<EtcdClient> client_;
  std::unique_ptr<Leadership> leader_;
  std::shared_ptr<const EtcdMirror> mirror_;
};

INSTANTIATE_TEST_SUITE_P(All, JournalBackends,
                         ::testing::Values(Backend::kSqlite, Backend::kEtcd, Backend::kEtcdMirror),
                         [](const auto& info) {
                           return info.param == Backend::kSqlite ? "sqlite"
                                  : info.param == Backend::kEtcd ? "etcd"
                                                                 : "etcd_mirror";
                         });

TEST_P(JournalBackends, ReopenAfterCloseKeepsEverything) {
  {
    auto s = Open(/*create=*/true);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ASSERT_TRUE((*s)->PutMachine({"m01", "/tmp/m01", 10, "127.0.0.1:7001"}).ok());
    ASSERT_TRUE((*s)->PutMachine({"m02", "/tmp/m02", 11, ""}).ok());
    ASSERT_TRUE((*s)->PutJob({"demo", "{\"x\":1}", 12}).ok());
    ASSERT_TRUE((*s)->Append("demo", 13, "{\"type\":\"create\"}").ok());
    ASSERT_TRUE((*s)->Append("demo", 14, "{\"type\":\"reconcile\"}").ok());
    ASSERT_TRUE((*s)->PutSnapshot("ledger", "{\"ettr\":0.5}").ok());
  }
  auto s = Open(/*create=*/false);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto machines = (*s)->Machines();
  ASSERT_TRUE(machines.ok());
  ASSERT_EQ(machines->size(), 2u);
  EXPECT_EQ((*machines)[1].dir, "/tmp/m02");
  EXPECT_EQ((*machines)[0].shard_addr, "127.0.0.1:7001");
  auto job = (*s)->Job();
  ASSERT_TRUE(job.ok() && job->has_value());
  EXPECT_EQ((*job)->spec_json, "{\"x\":1}");
  auto journal = (*s)->Journal("demo");
  ASSERT_TRUE(journal.ok());
  ASSERT_EQ(journal->size(), 2u);
  EXPECT_EQ((*journal)[1].now_ms, 14);
  EXPECT_LT((*journal)[0].seq, (*journal)[1].seq);
  // Appends after a reopen go after what is there.
  ASSERT_TRUE((*s)->Append("demo", 15, "{\"type\":\"reconcile\"}").ok());
  EXPECT_EQ((*(*s)->Journal("demo")).back().now_ms, 15);
  auto snap = (*s)->Snapshot("ledger");
  ASSERT_TRUE(snap.ok() && snap->has_value());
  EXPECT_EQ(**snap, "{\"ettr\":0.5}");
}

// A fleet's named jobs keep their journals where the main plane keeps its
// own: etcd under PREFIX/jobs/NAME/ with `up --ha`, so a controller on
// another machine replays every job. A submit its plane refuses leaves no
// journal behind.
TEST_P(JournalBackends, AFleetsNamedJobsReplayFromTheSameBackend) {
  PlaneOptions o = Options();
  o.job_journals = JobJournalsHere();
  const std::vector<std::string> machines = {"m01", "m02", "m03", "m04", "m05"};
  {
    auto f = Fleet::Open(o, "", TimeFromMs(1000));
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    for (const std::string& m : machines) ASSERT_TRUE((*f)->For(m)->Register(Reg(m), TimeFromMs(1000)).ok());
    for (const char* name : {"a", "b"}) {
      JobLaunch l = Launch();
      l.spec.id = name;
      ASSERT_TRUE((*f)->Submit(l, /*named=*/true, TimeFromMs(1000)).ok()) << name;
    }
    JobLaunch bad = Launch();
    bad.spec.id = "c";
    bad.persist_every = -1;
    EXPECT_FALSE((*f)->Submit(bad, /*named=*/true, TimeFromMs(1000)).ok());
  }
  auto names = o.job_journals->Names();
  ASSERT_TRUE(names.ok()) << names.status().ToString();
  EXPECT_EQ(*names, (std::vector<std::string>{"a", "b"})) << "c's journal was removed";
  o.create = false;
  auto f = Fleet::Open(o, "", TimeFromMs(2000));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const json s = (*f)->StatusJson(TimeFromMs(2000));
  ASSERT_EQ(s["jobs"].size(), 2u) << s.dump();
  EXPECT_EQ(s["jobs"][0]["name"], "a");
  EXPECT_EQ(s["jobs"][0]["placement"], json({"m01", "m02"}));
  EXPECT_EQ(s["jobs"][1]["placement"], json({"m03", "m04"}));
  EXPECT_EQ((*f)->For("m03"), (*f)->Job("b").value()) << "b's machine routes to b's replayed plane";
}

TEST_P(JournalBackends, SecondJobIsRefused) {
  auto s = Open(true);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->PutJob({"a", "{}", 1}).ok());
  Status st = (*s)->PutJob({"b", "{}", 2});
  EXPECT_EQ(st.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(st.message().find("job a"), std::string::npos) << st.message();
}

TEST_P(JournalBackends, MissingStateIsNotFoundAndSaysHowToStart) {
  auto s = Open(/*create=*/false);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Status::Code::kNotFound);
  EXPECT_NE(s.status().message().find("bulwark up"), std::string::npos) << s.status().message();
}

TEST_P(JournalBackends, DroppedRowsAreGoneAndTheRestKeepTheirOrder) {
  auto s = Open(true);
  ASSERT_TRUE(s.ok());
  // More runs than one etcd transaction deletes (kRangesPerTxn).
  const int rows = static_cast<int>(EtcdJournal::kRangesPerTxn) * 2 * 2 + 10;
  for (int i = 0; i < rows; ++i) ASSERT_TRUE((*s)->Append("demo", i, "{}").ok());
  auto all = (*s)->Journal("demo");
  ASSERT_TRUE(all.ok());
  std::vector<int64_t> drop;
  for (size_t i = 0; i < all->size(); i += 2) drop.push_back((*all)[i].seq);  // every other row: one run each
  drop.push_back((*all)[1].seq);  // and one run of three
  ASSERT_TRUE((*s)->DropJournalRows("demo", drop).ok());
  auto left = (*s)->Journal("demo");
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->size(), all->size() - drop.size());
  for (size_t i = 0; i < left->size(); ++i) EXPECT_EQ((*left)[i].now_ms, 3 + 2 * static_cast<int64_t>(i));
}

// --- the plane: journal replay --------------------------------------------

TEST_P(JournalBackends, RebuildFromJournalRestoresPlacementIncidentsAndDedup) {
  PlaneOptions o = Options();
  std::string placement_before;
  {
    auto p = Plane::Open(o, TimeFromMs(1000));
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    for (const char* m : {"m01", "m02", "m03"}) ASSERT_TRUE((*p)->Register(Reg(m), TimeFromMs(1000)).ok());
    auto id = (*p)->Submit(Launch(), TimeFromMs(1100));
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    ASSERT_TRUE((*p)->Report(Report("m01", {Step(1, 5, 1, 2000)}), TimeFromMs(2000)).ok());
    ASSERT_TRUE((*p)->Report(Report("m02", {DeviceFailed(1, 3000)}), TimeFromMs(3000)).ok());
    auto s = (*p)->StatusJson(TimeFromMs(3100));
    EXPECT_EQ(s["job"]["generation"], 2);
    placement_before = s["job"]["placement"].dump();
    EXPECT_EQ(placement_before, "[\"m01\",\"m03\"]");
  }
  o.create = false;
  auto p = Plane::Open(o, TimeFromMs(5000));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto s = (*p)->StatusJson(TimeFromMs(5000));
  EXPECT_EQ(s["job"]["generation"], 2);
  EXPECT_EQ(s["job"]["placement"].dump(), placement_before);
  EXPECT_EQ(s["job"]["last_step"], 5);
  auto incidents = (*p)->IncidentsJson();
  ASSERT_EQ(incidents.size(), 1u);
  EXPECT_EQ(incidents[0]["resolution"], "evicted_and_replaced");
  // The agent resends its device report (its ack was lost): applied once.
  auto acked = (*p)->Report(Report("m02", {DeviceFailed(1, 3000)}), TimeFromMs(5100));
  ASSERT_TRUE(acked.ok()) << acked.status().ToString();
  EXPECT_EQ(*acked, 1);
  EXPECT_EQ((*p)->IncidentsJson().size(), 1u);
}

// Compaction drops the step reports replay does not need, and a controller
// rebuilt from the compacted journal has exactly the state, incidents and
// ledger of one rebuilt from the whole journal.
TEST_P(JournalBackends, CompactedJournalRebuildsTheSameStateIncidentsAndLedger) {
  PlaneOptions o = Options();
  json status, incidents, ledger;
  size_t rows_before = 0;
  const Time end = TimeFromMs(200000);
  auto strip = [](json s) {
    s.erase("controller_up_s");
    for (json& m : s["machines"]) m.erase("last_heard_s_ago");
    return s;
  };
  {
    auto p = Plane::Open(o, TimeFromMs(1000));
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    for (const char* m : {"m01", "m02", "m03"}) ASSERT_TRUE((*p)->Register(Reg(m), TimeFromMs(1000)).ok());
    ASSERT_TRUE((*p)->Submit(Launch(), TimeFromMs(1100)).ok());
    int64_t seq1 = 0, seq2 = 0, t = 2000;
    // 400 steps, a device failure that restores to step 380, recomputation,
    // then new progress; m02's reports of the same steps interleave.
    for (int step = 1; step <= 400; ++step, t += 100) {
      ASSERT_TRUE((*p)->Report(Report("m01", {Step(++seq1, step, 1, t)}), TimeFromMs(t)).ok());
      if (step % 7 == 0) {
        ASSERT_TRUE((*p)->Report(Report("m02", {Step(++seq2, step, 1, t)}), TimeFromMs(t)).ok());
      }
    }
    ASSERT_TRUE((*p)->Report(Report("m02", {DeviceFailed(++seq2, t)}), TimeFromMs(t)).ok());
    t += 1500;
    ASSERT_TRUE((*p)->Report(Report("m01", {RestoredEvent(++seq1, 380, "peer", 400, 2, t)}), TimeFromMs(t)).ok());
    for (int step = 381; step <= 600; ++step, t += 100) {
      ASSERT_TRUE((*p)->Report(Report("m01", {Step(++seq1, step, 2, t)}), TimeFromMs(t)).ok());
    }
    status = strip((*p)->StatusJson(end));
    incidents = (*p)->IncidentsJson();
    ledger = (*p)->LedgerJson(end);
    auto store = Open(false);
    ASSERT_TRUE(store.ok());
    rows_before = (*store)->Journal("demo")->size();
  }
  ASSERT_GT(incidents.size(), 0u);
  EXPECT_GT(ledger["cumulative"]["seconds"]["recomputation"].get<double>(), 0.0) << ledger.dump();
  o.create = false;
  for (int reopen = 0; reopen < 2; ++reopen) {
    auto p = Plane::Open(o, TimeFromMs(199000));
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(strip((*p)->StatusJson(end)), status) << "reopen " << reopen;
    EXPECT_EQ((*p)->IncidentsJson(), incidents);
    EXPECT_EQ((*p)->LedgerJson(end), ledger);
  }
  auto store = Open(false);
  ASSERT_TRUE(store.ok());
  const size_t rows_after = (*store)->Journal("demo")->size();
  std::printf("[ journal] %zu rows -> %zu after compaction\n", rows_before, rows_after);
  EXPECT_LT(rows_after * 10, rows_before) << "step reports dominate a healthy journal and must go";
}

}  // namespace
}  // namespace bulwark::plane
