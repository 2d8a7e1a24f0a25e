// The controller's durable state: the SQLite store, and the plane rebuilt
// from its journal after the controller process is gone.
#include <gtest/gtest.h>

#include <fstream>

#include "controller/plane.h"
#include "controller/store.h"
#include "support/process.h"

namespace bulwark::controller {
namespace {

TEST(Store, ReopenAfterCloseKeepsEverything) {
  const std::string path = testing::MakeTempDir() + "/c.db";
  {
    auto s = Store::Open(path, /*create=*/true);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ASSERT_TRUE((*s)->PutMachine({"m01", "/tmp/m01", 10}).ok());
    ASSERT_TRUE((*s)->PutMachine({"m02", "/tmp/m02", 11}).ok());
    ASSERT_TRUE((*s)->PutJob({"demo", "{\"x\":1}", 12}).ok());
    ASSERT_TRUE((*s)->Append("demo", 13, "{\"type\":\"create\"}").ok());
    ASSERT_TRUE((*s)->Append("demo", 14, "{\"type\":\"reconcile\"}").ok());
    ASSERT_TRUE((*s)->PutSnapshot("ledger", "{\"ettr\":0.5}").ok());
  }
  auto s = Store::Open(path, /*create=*/false);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto machines = (*s)->Machines();
  ASSERT_TRUE(machines.ok());
  ASSERT_EQ(machines->size(), 2u);
  EXPECT_EQ((*machines)[1].dir, "/tmp/m02");
  auto job = (*s)->Job();
  ASSERT_TRUE(job.ok() && job->has_value());
  EXPECT_EQ((*job)->spec_json, "{\"x\":1}");
  auto journal = (*s)->Journal("demo");
  ASSERT_TRUE(journal.ok());
  ASSERT_EQ(journal->size(), 2u);
  EXPECT_EQ((*journal)[1].now_ms, 14);
  auto snap = (*s)->Snapshot("ledger");
  ASSERT_TRUE(snap.ok() && snap->has_value());
  EXPECT_EQ(**snap, "{\"ettr\":0.5}");
}

TEST(Store, SecondJobIsRefused) {
  auto s = Store::Open(testing::MakeTempDir() + "/c.db", true);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->PutJob({"a", "{}", 1}).ok());
  Status st = (*s)->PutJob({"b", "{}", 2});
  EXPECT_EQ(st.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(st.message().find("job a"), std::string::npos) << st.message();
}

TEST(Store, MissingDatabaseIsNotFoundAndSaysHowToStart) {
  auto s = Store::Open(testing::MakeTempDir() + "/none.db", /*create=*/false);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Status::Code::kNotFound);
  EXPECT_NE(s.status().message().find("bulwark up"), std::string::npos) << s.status().message();
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

wire::RegisterRequest Reg(const std::string& m) {
  wire::RegisterRequest r;
  r.set_machine(m);
  r.set_machine_dir("/tmp/" + m);
  r.set_incarnation(7);
  return r;
}

wire::ReportRequest Report(const std::string& m, std::vector<wire::AgentEvent> events) {
  wire::ReportRequest r;
  r.set_machine(m);
  r.set_incarnation(7);
  for (auto& e : events) *r.add_events() = e;
  return r;
}

wire::AgentEvent Step(int64_t seq, int64_t step, int64_t gen, int64_t at_ms) {
  wire::AgentEvent e;
  e.set_kind(wire::AgentEvent::STEP);
  e.set_seq(seq);
  e.set_step(step);
  e.set_generation(gen);
  e.set_observed_ms(at_ms);
  return e;
}

wire::AgentEvent DeviceFailed(int64_t seq, int64_t at_ms) {
  wire::AgentEvent e;
  e.set_kind(wire::AgentEvent::INSPECTION_FAILED);
  e.set_seq(seq);
  e.set_inspection("device");
  e.set_detail("Xid 48");
  e.set_observed_ms(at_ms);
  return e;
}

JobLaunch Launch() {
  JobLaunch l;
  l.spec.id = "demo";
  l.spec.world_size = 2;
  l.argv = {"/bin/true"};
  return l;
}

TEST(Plane, RebuildFromJournalRestoresPlacementIncidentsAndDedup) {
  PlaneOptions o;
  o.db_path = testing::MakeTempDir() + "/c.db";
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

TEST(Plane, SubmitWithTooFewAgentsSaysHowMany) {
  PlaneOptions o;
  o.db_path = testing::MakeTempDir() + "/c.db";
  auto p = Plane::Open(o, TimeFromMs(1000));
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE((*p)->Register(Reg("m01"), TimeFromMs(1000)).ok());
  auto id = (*p)->Submit(Launch(), TimeFromMs(1000));
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("needs 2 machines but 1"), std::string::npos) << id.status().message();
}

TEST(Plane, UnknownMachineIsNotFoundByName) {
  PlaneOptions o;
  o.db_path = testing::MakeTempDir() + "/c.db";
  auto p = Plane::Open(o, TimeFromMs(1000));
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE((*p)->Register(Reg("m01"), TimeFromMs(1000)).ok());
  Status inject = (*p)->Inject("m99", "crash", 0);
  EXPECT_EQ(inject.code(), Status::Code::kNotFound);
  EXPECT_NE(inject.message().find("m99"), std::string::npos) << inject.message();
  Status ret = (*p)->ReturnMachine("m42", TimeFromMs(1100));
  EXPECT_EQ(ret.code(), Status::Code::kNotFound);
  EXPECT_NE(ret.message().find("m42"), std::string::npos) << ret.message();
}

}  // namespace
}  // namespace bulwark::controller
