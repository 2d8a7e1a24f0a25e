// The controller's durable state: the SQLite store, and the plane rebuilt
// from its journal after the controller process is gone.
#include <gtest/gtest.h>

#include <sqlite3.h>

#include <fstream>
#include <map>

#include "plane/actuator.h"
#include "plane/codec.h"
#include "plane/journal_compaction.h"
#include "plane/plane.h"
#include "plane/store.h"
#include "support/agent_messages.h"
#include "support/plane_commands.h"
#include "support/process.h"

namespace bulwark::plane {
namespace {

using testing::Desired;
using testing::Launch;
using testing::DeviceFailed;
using testing::Reg;
using testing::Report;
using testing::RestoredEvent;
using testing::Step;

TEST(Store, DatabaseWithoutShardAddressesIsMigrated) {
  // A database written before in-memory checkpoints: no shard_addr column.
  const std::string path = testing::MakeTempDir() + "/c.db";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
                         "INSERT INTO meta VALUES ('format', 'bulwark-controller-1');"
                         "CREATE TABLE machines (id TEXT PRIMARY KEY, dir TEXT NOT NULL, registered_ms INTEGER NOT NULL);"
                         "INSERT INTO machines VALUES ('m01', '/tmp/m01', 10);",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto s = Store::Open(path, /*create=*/false);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto machines = (*s)->Machines();
  ASSERT_TRUE(machines.ok()) << machines.status().ToString();
  ASSERT_EQ(machines->size(), 1u);
  EXPECT_EQ((*machines)[0].shard_addr, "");
  ASSERT_TRUE((*s)->PutMachine({"m01", "/tmp/m01", 20, "127.0.0.1:7001"}).ok());
  EXPECT_EQ((*(*s)->Machines())[0].shard_addr, "127.0.0.1:7001");
}

TEST(Store, CorruptDatabaseIsCorruptNamingThePath) {
  const std::string path = testing::MakeTempDir() + "/c.db";
  std::ofstream(path) << "this is not an sqlite database, just some text that fills a page......";
  auto s = Store::Open(path, /*create=*/false);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Status::Code::kCorrupt) << s.status().ToString();
  EXPECT_NE(s.status().message().find(path), std::string::npos) << s.status().message();
}

// --- the plane: journal replay --------------------------------------------

wire::RegisterRequest RegWithShards(const std::string& m) {
  wire::RegisterRequest r = Reg(m);
  r.set_shard_addr(m + ":7000");
  return r;
}

// A report carrying the agent's current shard holdings.
wire::ReportRequest Holding(const std::string& m, std::vector<std::tuple<int, int64_t, bool>> copies) {
  wire::ReportRequest r = Report(m, {});
  for (const auto& [rank, step, backup] : copies) {
    wire::ShardCopy* c = r.add_shards();
    c->set_rank(rank);
    c->set_step(step);
    c->set_backup(backup);
  }
  return r;
}


// The journal's replay and compaction through a Plane, and the store's
// basic contract, run for SQLite and etcd alike in
// tests/process/journal_backends_test.cc.

TEST(JournalCompaction, KeepsEachRunsEndsAndEveryCategoryChange) {
  using nlohmann::json;
  // The pure choice keeps each run's ends and every category change.
  std::vector<JournalEntry> rows;
  auto row = [&](int64_t seq, int64_t step, int64_t at) {
    rows.push_back({seq, at, json{{"type", "event"}, {"event", EncodeEvent(StepCompleted{step, TimeFromMs(at)})}}.dump()});
  };
  for (int i = 1; i <= 5; ++i) row(i, i, i * 10);  // productive 1..5
  rows.push_back({6, 60, json{{"type", "reconcile"}}.dump()});
  for (int i = 3; i <= 8; ++i) row(4 + i, i, i * 10 + 100);  // 3..5 recomputed, 6..8 new
  EXPECT_EQ(StepRowsToDrop(rows), (std::vector<int64_t>{2, 3, 4, 8, 10, 11}));
}

TEST(Plane, StepsOfAnOldGenerationAreNotProgress) {
  PlaneOptions o;
  o.db_path = testing::MakeTempDir() + "/c.db";
  auto p = Plane::Open(o, TimeFromMs(1000));
  ASSERT_TRUE(p.ok());
  for (const char* m : {"m01", "m02"}) ASSERT_TRUE((*p)->Register(Reg(m), TimeFromMs(1000)).ok());
  ASSERT_TRUE((*p)->Submit(Launch(), TimeFromMs(1000)).ok());
  ASSERT_TRUE((*p)->Report(Report("m01", {Step(1, 9, /*gen=*/0, 2000)}), TimeFromMs(2000)).ok());
  EXPECT_EQ((*p)->StatusJson(TimeFromMs(2000))["job"]["last_step"], 0);
}

// --- in-memory checkpoints -------------------------------------------------

TEST(Codec, CheckpointRestoredRoundTripsThroughTheJournal) {
  const Event e = CheckpointRestored{41, "peer", 43, 812.5, TimeFromMs(9000)};
  Result<Event> back = DecodeEvent(nlohmann::json::parse(EncodeEvent(e).dump()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  const auto* x = std::get_if<CheckpointRestored>(&*back);
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->step, 41);
  EXPECT_EQ(x->source, "peer");
  EXPECT_EQ(x->newest_step, 43);
  EXPECT_EQ(x->restore_ms, 812.5);
  EXPECT_EQ(ToMs(x->observed), 9000);
  nlohmann::json missing = EncodeEvent(e);
  missing.erase("source");
  EXPECT_FALSE(DecodeEvent(missing).ok());
}

TEST(Codec, LadderEventsRoundTripThroughTheJournal) {
  DiagnosticsReported d{7, "m03", {{"compute", false, "GEMM hash differs", 81.5}, {"alignment", true, "", 900}},
                        "9f86d081884c7d65", TimeFromMs(12000)};
  Result<Event> back = DecodeEvent(nlohmann::json::parse(EncodeEvent(d).dump()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  const auto* x = std::get_if<DiagnosticsReported>(&*back);
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->incident, 7);
  EXPECT_EQ(x->machine, "m03");
  EXPECT_EQ(x->alignment_hash, "9f86d081884c7d65");
  ASSERT_EQ(x->results.size(), 2u);
  EXPECT_FALSE(x->results[0].passed);
  EXPECT_EQ(x->results[0].detail, "GEMM hash differs");
  EXPECT_EQ(x->results[0].ms, 81.5);
  EXPECT_EQ(ToMs(x->observed), 12000);
  Result<Event> dl = DecodeEvent(EncodeEvent(LadderDeadline{7, TimeFromMs(13000)}));
  ASSERT_TRUE(dl.ok()) << dl.status().ToString();
  EXPECT_EQ(std::get<LadderDeadline>(*dl).incident, 7);
  nlohmann::json bad = EncodeEvent(d);
  bad["results"] = 3;
  EXPECT_FALSE(DecodeEvent(bad).ok());
}

TEST(Codec, LaunchKeepsPersistSettingsAndOldLaunchesGetDefaults) {
  JobLaunch l = Launch();
  l.persist_every = 7;
  l.durable_dir = "/shared/durable/demo";
  Result<JobLaunch> back = DecodeLaunch(EncodeLaunch(l));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->persist_every, 7);
  EXPECT_EQ(back->durable_dir, "/shared/durable/demo");
  nlohmann::json old = EncodeLaunch(l);
  old.erase("persist_every");
  old.erase("durable_dir");
  back = DecodeLaunch(old);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->persist_every, JobLaunch::kDefaultPersistEvery);
  EXPECT_EQ(back->durable_dir, "");
}

TEST(Actuator, StartRanksCarriesBackupPeerRestoreSourcesAndPersistSettings) {
  JobLaunch l = Launch();
  l.spec.world_size = 4;
  l.spec.ranks_per_machine = 2;
  l.persist_every = 25;
  l.durable_dir = "/shared/durable/demo";
  Placement p;
  p.generation = 2;
  p.ranks_per_machine = 2;
  p.slots = {"m01", "s01"};
  const BackupPlan plan = PlanBackups(p, Topology{}, {{"m01", "m01:7000"}, {"s01", "s01:7000"}, {"m03", "m03:7000"}},
                                      {{"m03", 2, 40, true}, {"m03", 3, 40, true}, {"m01", 0, 40, false}});
  const Action restart = RestartAllAction(p, 40, "device failed on m02");
  std::vector<MachineCommand> cmds = Actuate(restart, l, p, plan);
  ASSERT_EQ(cmds.size(), 2u);
  const wire::Command& m01 = cmds[0].command;
  EXPECT_EQ(m01.kind(), wire::Command::START_RANKS);
  EXPECT_EQ(m01.backup_machine(), "s01");
  EXPECT_EQ(m01.backup_addr(), "s01:7000");
  EXPECT_EQ(m01.restore_from_size(), 0);  // its own memory holds ranks 0 and 1
  EXPECT_EQ(m01.persist_every(), 25);
  EXPECT_EQ(m01.durable_dir(), "/shared/durable/demo");
  ASSERT_EQ(m01.backup_of_size(), 2);  // s01's ranks, whose backups m01 holds
  EXPECT_EQ(m01.backup_of(0), 2);
  EXPECT_EQ(m01.backup_of(1), 3);
  const wire::Command& s01 = cmds[1].command;
  EXPECT_EQ(cmds[1].machine, "s01");
  EXPECT_EQ(s01.backup_machine(), "m01");
  ASSERT_EQ(s01.restore_from_size(), 2);
  EXPECT_EQ(s01.restore_from(0).rank(), 2);
  EXPECT_EQ(s01.restore_from(0).machine(), "m03");
  EXPECT_EQ(s01.restore_from(0).addr(), "m03:7000");
  EXPECT_EQ(s01.restore_from(0).step(), 40);
  EXPECT_EQ(s01.restore_from(1).rank(), 3);

  // Without a plan for this placement the ranks start without routes.
  cmds = Actuate(restart, l, p, BackupPlan{});
  ASSERT_EQ(cmds.size(), 2u);
  EXPECT_EQ(cmds[1].command.backup_machine(), "");
  EXPECT_EQ(cmds[1].command.restore_from_size(), 0);
  EXPECT_EQ(cmds[1].command.persist_every(), 25);
}

TEST(Plane, StatusShowsShardHoldingsAndBackupPeers) {
  PlaneOptions o;
  o.db_path = testing::MakeTempDir() + "/c.db";
  auto p = Plane::Open(o, TimeFromMs(1000));
  ASSERT_TRUE(p.ok());
  for (const char* m : {"m01", "m02"}) ASSERT_TRUE((*p)->Register(RegWithShards(m), TimeFromMs(1000)).ok());
  ASSERT_TRUE((*p)->Submit(Launch(), TimeFromMs(1000)).ok());
  ASSERT_TRUE((*p)->Report(Holding("m01", {{0, 7, false}, {1, 6, true}}), TimeFromMs(2000)).ok());
  ASSERT_TRUE((*p)->Report(Holding("m02", {{1, 7, false}, {0, 7, true}}), TimeFromMs(2000)).ok());
  // Holdings are replaced, not accumulated: m01 dropped its old backup.
  ASSERT_TRUE((*p)->Report(Holding("m01", {{0, 8, false}, {1, 8, true}}), TimeFromMs(2500)).ok());
  auto s = (*p)->StatusJson(TimeFromMs(2500));
  const auto& m01 = s["machines"][0];
  EXPECT_EQ(m01["id"], "m01");
  EXPECT_EQ(m01["shard_addr"], "m01:7000");
  EXPECT_EQ(m01["shards"].dump(),
            R"([{"copy":"primary","rank":0,"step":8},{"copy":"backup","rank":1,"step":8}])");
  const auto& ck = s["job"]["checkpoints"];
  EXPECT_EQ(ck["backup_peers"][0]["backup_machine"], "m02");
  EXPECT_EQ(ck["backup_peers"][1]["backup_machine"], "m01");
  EXPECT_EQ(ck["ranks"][1]["primary"].dump(), R"([{"machine":"m02","step":7}])");
  EXPECT_EQ(ck["ranks"][1]["backups"].dump(), R"([{"machine":"m01","step":8}])");
}

TEST(Plane, RestartRoutesTheStandbysRanksToTheEvictedMachinesBackupPeer) {
  PlaneOptions o;
  o.db_path = testing::MakeTempDir() + "/c.db";
  auto p = Plane::Open(o, TimeFromMs(1000));
  ASSERT_TRUE(p.ok());
  for (const char* m : {"m01", "m02", "m03", "s01"}) {
    ASSERT_TRUE((*p)->Register(RegWithShards(m), TimeFromMs(1000)).ok());
  }
  JobLaunch l = Launch();
  l.spec.world_size = 3;
  ASSERT_TRUE((*p)->Submit(l, TimeFromMs(1000)).ok());
  // Ring m01 -> m02 -> m03 -> m01, one rank each, all at step 9.
  ASSERT_TRUE((*p)->Report(Holding("m01", {{0, 9, false}, {2, 9, true}}), TimeFromMs(2000)).ok());
  ASSERT_TRUE((*p)->Report(Holding("m02", {{1, 9, false}, {0, 9, true}}), TimeFromMs(2000)).ok());
  ASSERT_TRUE((*p)->Report(Holding("m03", {{2, 9, false}, {1, 9, true}}), TimeFromMs(2000)).ok());
  ASSERT_TRUE((*p)->Report(Report("s01", {}), TimeFromMs(2000)).ok());
  // Every report carries the agent's holdings, the fault's too.
  wire::ReportRequest fault = Holding("m02", {{1, 9, false}, {0, 9, true}});
  *fault.add_events() = DeviceFailed(1, 3000);
  ASSERT_TRUE((*p)->Report(fault, TimeFromMs(3000)).ok());
  EXPECT_EQ((*p)->StatusJson(TimeFromMs(3000))["job"]["placement"].dump(), R"(["m01","s01","m03"])");

  const wire::Command s01 = Desired(**p, "s01", 3000);
  EXPECT_EQ(s01.kind(), wire::Command::START_RANKS);
  EXPECT_EQ(s01.backup_machine(), "m03");
  EXPECT_EQ(s01.backup_addr(), "m03:7000");
  ASSERT_EQ(s01.restore_from_size(), 2);
  EXPECT_EQ(s01.restore_from(0).machine(), "m03");  // m02's backup peer
  EXPECT_EQ(s01.restore_from(0).step(), 9);
  // m02 is evicted (its GPU failed) but its agent still reports, so its
  // memory still serves; after the backup, as a primary left behind.
  EXPECT_EQ(s01.restore_from(1).machine(), "m02");
  const wire::Command m01 = Desired(**p, "m01", 3000);
  EXPECT_EQ(m01.backup_machine(), "s01");  // its old peer was evicted
  ASSERT_EQ(m01.restore_from_size(), 1);
  EXPECT_EQ(m01.restore_from(0).machine(), "m02");
}

TEST(Plane, SilentMachinesCopiesAreNotOfferedForARestore) {
  PlaneOptions o;
  o.db_path = testing::MakeTempDir() + "/c.db";
  auto p = Plane::Open(o, TimeFromMs(1000));
  ASSERT_TRUE(p.ok());
  for (const char* m : {"m01", "m02", "s01"}) ASSERT_TRUE((*p)->Register(RegWithShards(m), TimeFromMs(1000)).ok());
  ASSERT_TRUE((*p)->Submit(Launch(), TimeFromMs(1000)).ok());
  ASSERT_TRUE((*p)->Report(Holding("m01", {{0, 9, false}, {1, 9, true}}), TimeFromMs(2000)).ok());
  ASSERT_TRUE((*p)->Report(Holding("m02", {{1, 9, false}, {0, 9, true}}), TimeFromMs(2000)).ok());
  // m02 goes silent; the others keep reporting.
  for (int64_t t : {3000, 4000, 5000}) {
    ASSERT_TRUE((*p)->Report(Holding("m01", {{0, 9, false}, {1, 9, true}}), TimeFromMs(t)).ok());
    ASSERT_TRUE((*p)->Report(Report("s01", {}), TimeFromMs(t)).ok());
  }
  (*p)->Tick(TimeFromMs(5000));
  EXPECT_EQ((*p)->StatusJson(TimeFromMs(5000))["job"]["placement"].dump(), R"(["m01","s01"])");
  // Rank 0's backup died with m02: only m01's own memory is left for it.
  EXPECT_EQ(Desired(**p, "m01", 5000).restore_from_size(), 0);
  const wire::Command s01 = Desired(**p, "s01", 5000);
  ASSERT_EQ(s01.restore_from_size(), 1);
  EXPECT_EQ(s01.restore_from(0).machine(), "m01");
  EXPECT_EQ(s01.backup_machine(), "m01");
}

// A stall of the controller itself (no tick, no report handled for 5 s) is
// not every agent's silence; a machine silent while the controller ticks on is.
TEST(Plane, TheControllersOwnStallEvictsNobody) {
  PlaneOptions o;
  o.db_path = testing::MakeTempDir() + "/c.db";
  auto p = Plane::Open(o, TimeFromMs(1000));
  ASSERT_TRUE(p.ok());
  for (const char* m : {"m01", "m02", "s01"}) ASSERT_TRUE((*p)->Register(Reg(m), TimeFromMs(1000)).ok());
  ASSERT_TRUE((*p)->Submit(Launch(), TimeFromMs(1000)).ok());
  int64_t t = 1000;
  for (; t <= 3000; t += 250) {
    for (const char* m : {"m01", "m02", "s01"}) ASSERT_TRUE((*p)->Report(Report(m, {}), TimeFromMs(t)).ok());
    (*p)->Tick(TimeFromMs(t));
  }
  // 5 s with nothing handled, then the ticks resume before the queued reports.
  t += 5000;
  (*p)->Tick(TimeFromMs(t));
  EXPECT_EQ((*p)->StatusJson(TimeFromMs(t))["job"]["placement"].dump(), R"(["m01","m02"])");
  // m02 now truly goes silent while the controller ticks on.
  for (int64_t end = t + 3000; t <= end; t += 250) {
    for (const char* m : {"m01", "s01"}) ASSERT_TRUE((*p)->Report(Report(m, {}), TimeFromMs(t)).ok());
    (*p)->Tick(TimeFromMs(t));
  }
  EXPECT_EQ((*p)->StatusJson(TimeFromMs(t))["job"]["placement"].dump(), R"(["m01","s01"])");
}

TEST(Plane, RestoreReportIsRecordedInTheIncidentAndSurvivesARestart) {
  PlaneOptions o;
  o.db_path = testing::MakeTempDir() + "/c.db";
  {
    auto p = Plane::Open(o, TimeFromMs(1000));
    ASSERT_TRUE(p.ok());
    for (const char* m : {"m01", "m02", "m03"}) ASSERT_TRUE((*p)->Register(RegWithShards(m), TimeFromMs(1000)).ok());
    ASSERT_TRUE((*p)->Submit(Launch(), TimeFromMs(1100)).ok());
    ASSERT_TRUE((*p)->Report(Report("m01", {Step(1, 5, 1, 2000)}), TimeFromMs(2000)).ok());
    ASSERT_TRUE((*p)->Report(Report("m02", {DeviceFailed(1, 3000)}), TimeFromMs(3000)).ok());
    // A restore read from the old generation's ranks is not this restart's.
    ASSERT_TRUE((*p)->Report(Report("m01", {RestoredEvent(2, 1, "durable", 5, 1, 3500)}), TimeFromMs(3500)).ok());
    EXPECT_FALSE((*p)->IncidentsJson()[0].contains("restore_source"));
    ASSERT_TRUE((*p)->Report(Report("m01", {RestoredEvent(3, 4, "peer", 6, 2, 3600),
                                            Step(4, 5, 2, 3700)}),
                             TimeFromMs(3700)).ok());
    auto inc = (*p)->IncidentsJson()[0];
    EXPECT_EQ(inc["restore_source"], "peer");
    EXPECT_EQ(inc["restored_step"], 4);
    EXPECT_EQ(inc["restore_ms"], 750.5);
    EXPECT_EQ(inc["step_at_fault"], 6);
    EXPECT_EQ(inc["lost_steps"], 2);
  }
  o.create = false;
  auto p = Plane::Open(o, TimeFromMs(5000));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto inc = (*p)->IncidentsJson()[0];
  EXPECT_EQ(inc["restore_source"], "peer");
  EXPECT_EQ(inc["lost_steps"], 2);
  // The shard server addresses come back from the store, not from a new
  // registration: backups of the next restart still have somewhere to go.
  EXPECT_EQ((*p)->StatusJson(TimeFromMs(5000))["machines"][0]["shard_addr"], "m01:7000");
}

// A job on the ring `machines` (one rank each, rank i on machines[i]),
// every machine holding its rank's copy and its predecessor's backup at
// step 9, and s01 standing by; m02's device fails at 3 s, the controller
// decides the restart, and dies before any agent took it.
void RestartDecidedThenTheControllerDies(const PlaneOptions& o, const std::vector<std::string>& machines) {
  auto p = Plane::Open(o, TimeFromMs(1000));
  ASSERT_TRUE(p.ok());
  for (const std::string& m : machines) ASSERT_TRUE((*p)->Register(RegWithShards(m), TimeFromMs(1000)).ok());
  ASSERT_TRUE((*p)->Register(RegWithShards("s01"), TimeFromMs(1000)).ok());
  JobLaunch l = Launch();
  l.spec.world_size = static_cast<int>(machines.size());
  ASSERT_TRUE((*p)->Submit(l, TimeFromMs(1000)).ok());
  const int n = static_cast<int>(machines.size());
  for (int i = 0; i < n; ++i) {
    wire::ReportRequest r = Holding(machines[i], {{i, 9, false}, {(i + n - 1) % n, 9, true}});
    if (machines[i] == "m02") *r.add_events() = DeviceFailed(1, 3000);
    ASSERT_TRUE((*p)->Report(r, TimeFromMs(machines[i] == "m02" ? 3000 : 2000)).ok());
  }
  EXPECT_EQ((*p)->StatusJson(TimeFromMs(3000))["job"]["placement"][1], "s01") << "s01 in m02's slot";
}

// A restart decided just before the controller died is replayed without
// restore sources; the next controller holds it until the job's machines
// have reported what they hold, so the standby in the evicted machine's
// slot restores from that slot's backup peer, not from durable storage.
TEST(Plane, ARestartReplayedFromTheJournalWaitsForItsMachinesHoldings) {
  PlaneOptions o;
  o.db_path = testing::MakeTempDir() + "/c.db";
  o.policy.process_stuck = std::chrono::seconds(7);
  ASSERT_NO_FATAL_FAILURE(RestartDecidedThenTheControllerDies(o, {"m01", "m02", "m03"}));
  o.create = false;
  auto p = Plane::Open(o, TimeFromMs(5000));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  (*p)->Serving(TimeFromMs(5000));
  for (const char* m : {"m01", "m03", "s01"}) ASSERT_TRUE((*p)->Register(RegWithShards(m), TimeFromMs(5100)).ok());
  // s01 asks first: m03, which holds rank 1's backup, has not reported yet.
  const int64_t stream = (*p)->OpenStream("s01");
  std::string sent;
  bool superseded = false;
  EXPECT_FALSE((*p)->NextCommand("s01", stream, &sent, TimeFromMs(5200), &superseded).has_value())
      << "s01's restart went out before m03 said what it holds";
  ASSERT_TRUE((*p)->Report(Holding("m01", {{0, 9, false}, {2, 9, true}}), TimeFromMs(5300)).ok());
  ASSERT_TRUE((*p)->Report(Holding("m03", {{2, 9, false}, {1, 9, true}}), TimeFromMs(5300)).ok());
  ASSERT_TRUE((*p)->Report(Report("s01", {}), TimeFromMs(5300)).ok());
  (*p)->Tick(TimeFromMs(5400));
  std::optional<wire::Command> c = (*p)->NextCommand("s01", stream, &sent, TimeFromMs(5400), &superseded);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->kind(), wire::Command::START_RANKS);
  ASSERT_EQ(c->restore_from_size(), 1) << c->DebugString();
  EXPECT_EQ(c->restore_from(0).machine(), "m03");
  EXPECT_EQ(c->restore_from(0).rank(), 1);
  EXPECT_EQ(c->restore_from(0).step(), 9);
  EXPECT_EQ(c->process_stuck_ms(), 7000) << "the agent judges a stuck rank by the policy's limit";
}

// A machine of the job that never comes back holds the restart for the
// reconnect grace only; then it goes out with the sources known.
TEST(Plane, AReplayedRestartWaitsNoLongerThanTheReconnectGrace) {
  PlaneOptions o;
  o.db_path = testing::MakeTempDir() + "/c.db";
  ASSERT_NO_FATAL_FAILURE(RestartDecidedThenTheControllerDies(o, {"m01", "m02"}));
  o.create = false;
  auto p = Plane::Open(o, TimeFromMs(5000));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  (*p)->Serving(TimeFromMs(5000));
  ASSERT_TRUE((*p)->Register(RegWithShards("s01"), TimeFromMs(5100)).ok());
  ASSERT_TRUE((*p)->Report(Report("s01", {}), TimeFromMs(5100)).ok());
  const int64_t stream = (*p)->OpenStream("s01");
  std::string sent;
  bool superseded = false;
  (*p)->Tick(TimeFromMs(5200));
  EXPECT_FALSE((*p)->NextCommand("s01", stream, &sent, TimeFromMs(5200), &superseded).has_value());
  // m01 stays silent past the grace (10 s): s01 is not held forever.
  const int64_t after = 5000 + ToMs(o.reconnect_grace) + 100;
  ASSERT_TRUE((*p)->Report(Report("s01", {}), TimeFromMs(after)).ok());
  (*p)->Tick(TimeFromMs(after));
  std::optional<wire::Command> c = (*p)->NextCommand("s01", stream, &sent, TimeFromMs(after), &superseded);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->kind(), wire::Command::START_RANKS);
}

}  // namespace
}  // namespace bulwark::plane
