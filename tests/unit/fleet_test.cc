// Several jobs on one fleet (plane/fleet.h): each job takes only the
// machines it needs, a fault in one never reaches the other, the one pool's
// machine goes to the job that asked first, and a reopened fleet replays
// every job.
#include <gtest/gtest.h>

#include <fstream>

#include "plane/fleet.h"
#include "support/agent_messages.h"
#include "support/plane_commands.h"
#include "support/process.h"

namespace bulwark::plane {
namespace {

using nlohmann::json;
using testing::Reg;

Time At(int64_t ms) { return TimeFromMs(ms); }

class FleetTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::MakeTempDir(); }

  std::unique_ptr<Fleet> Open(int64_t at_ms) {
    PlaneOptions o;
    o.db_path = dir_ + "/controller.db";
    auto f = Fleet::Open(o, dir_ + "/jobs", At(at_ms));
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    return f.ok() ? std::move(*f) : nullptr;
  }
  // Every machine reports (heard) at `at_ms`, each to the plane that serves it.
  static void ReportAll(Fleet& f, const std::vector<std::string>& machines, int64_t at_ms) {
    for (const std::string& m : machines) {
      EXPECT_TRUE(f.For(m)->Report(testing::Report(m, {}), At(at_ms)).ok()) << m;
    }
  }
  // A fleet of m01-m05 running jobs a and b, opened at `at_ms`.
  std::unique_ptr<Fleet> TwoJobs(int64_t at_ms) {
    auto f = Open(at_ms);
    if (!f) return nullptr;
    for (const std::string& m : all_) EXPECT_TRUE(f->For(m)->Register(Reg(m), At(at_ms)).ok());
    EXPECT_TRUE(SubmitJob(*f, "a", at_ms).ok());
    EXPECT_TRUE(SubmitJob(*f, "b", at_ms).ok());
    return f;
  }
  static Status SubmitJob(Fleet& f, const std::string& name, int64_t at_ms) {
    JobLaunch l = testing::Launch();
    l.spec.id = name;
    Result<std::string> id = f.Submit(l, /*named=*/true, At(at_ms));
    return id.status();
  }
  // job name -> its status entry.
  static std::map<std::string, json> Jobs(Fleet& f, int64_t at_ms) {
    std::map<std::string, json> out;
    const json s = f.StatusJson(At(at_ms));
    for (const json& j : s["jobs"]) out[j["name"].get<std::string>()] = j;
    return out;
  }

  std::string dir_;
  const std::vector<std::string> all_ = {"m01", "m02", "m03", "m04", "m05"};
};

// A submit the job's own plane refuses (here a negative persist interval;
// at 12,500 agents, machines moved to it but not heard there in time) leaves
// nothing behind: the machines are the pool's again and the name is free
// (before, every retry said the job "already runs").
TEST_F(FleetTest, ASubmitItsJobRefusesLeavesThePoolAsItWas) {
  auto f = Open(1000);
  ASSERT_TRUE(f);
  for (const std::string& m : all_) ASSERT_TRUE(f->For(m)->Register(Reg(m), At(1000)).ok());
  JobLaunch bad = testing::Launch();
  bad.spec.id = "a";
  bad.persist_every = -1;
  EXPECT_FALSE(f->Submit(bad, /*named=*/true, At(1000)).ok());
  EXPECT_TRUE(Jobs(*f, 1000).empty());
  for (const std::string& m : all_) EXPECT_EQ(f->For(m), f->main()) << m << " is the pool's again";
  ASSERT_TRUE(SubmitJob(*f, "a", 1000).ok()) << "the name is free";
  EXPECT_EQ(Jobs(*f, 1000)["a"]["placement"], json({"m01", "m02"}));
}

// Each job runs with its own policy: the fields of its job file laid over
// the cluster's, in its plane alone, again after the fleet is reopened from
// the journals; a field the policy refuses fails that submit and nothing else.
TEST_F(FleetTest, EachJobRunsWithItsOwnPolicyFieldsAcrossAReopen) {
  auto f = Open(1000);
  ASSERT_TRUE(f);
  for (const std::string& m : all_) ASSERT_TRUE(f->For(m)->Register(Reg(m), At(1000)).ok());
  JobLaunch a = testing::Launch();
  a.spec.id = "a";
  a.policy = {{"hang_first_step", 20}, {"slow_round", 4}};
  ASSERT_TRUE(f->Submit(a, /*named=*/true, At(1000)).ok());
  JobLaunch bad = testing::Launch();
  bad.spec.id = "b";
  bad.policy = {{"slow_rund", 4}};
  Result<std::string> refused = f->Submit(bad, /*named=*/true, At(1000));
  EXPECT_EQ(refused.status().message(),
            "job b: policy: unknown field 'slow_rund'; did you mean 'slow_round'? (the fields: "
            "docs/control-plane.md, \"The policy a cluster runs with\")");
  ASSERT_TRUE(SubmitJob(*f, "b", 1000).ok());
  auto check = [&](Fleet& fleet, int64_t at_ms) {
    auto jobs = Jobs(fleet, at_ms);
    EXPECT_EQ(jobs["a"]["policy"], json({{"hang_first_step", 20.0}, {"slow_round", 4.0}})) << jobs["a"].dump();
    EXPECT_EQ(jobs["a"]["detectors"]["hang_allowance_s"], 20.0) << "its first step's allowance";
    EXPECT_EQ(jobs["b"]["policy"], json::object()) << "the cluster's defaults";
    EXPECT_EQ(jobs["b"]["detectors"]["hang_allowance_s"], 60.0);
    EXPECT_EQ(fleet.StatusJson(At(at_ms))["policy"], json::object()) << "the cluster's own is unchanged";
  };
  check(*f, 1000);
  f.reset();
  auto again = Open(2000);
  ASSERT_TRUE(again);
  check(*again, 2000);
}

// The fleet's pool is sized over every job's machines by the standby rule
// (P99 of the day's failures), and what it lacks is asked of the cluster
// manager once: again only for what is not already on its way.
TEST_F(FleetTest, ThePoolIsSizedOverEveryJobsMachinesAndTheManagerAskedOnce) {
  struct Recorder : cluster::Backend {
    std::vector<std::string> calls;
    void Drain(const std::string& m, const std::string&) override { calls.push_back("drain " + m); }
    void Resume(const std::string& m, bool) override { calls.push_back("resume " + m); }
    void Acquire(const std::string& request, int count) override {
      calls.push_back("acquire " + std::to_string(count) + " for " + request);
    }
  };
  auto backend = std::make_shared<Recorder>();
  PlaneOptions o;
  o.db_path = dir_ + "/controller.db";
  o.policy.daily_failure_rate = 0.06;  // 4 machines in jobs: a target of 2 (1 gives 0.98 < 0.99)
  o.backend = backend;
  auto opened = Fleet::Open(o, dir_ + "/jobs", At(1000));
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Fleet& f = **opened;
  f.Tick(At(1000));
  EXPECT_TRUE(backend->calls.empty()) << "no named job: the fleet sizes nothing";
  for (const std::string& m : all_) ASSERT_TRUE(f.For(m)->Register(Reg(m), At(1000)).ok());
  ASSERT_TRUE(SubmitJob(f, "a", 1000).ok());
  ASSERT_TRUE(SubmitJob(f, "b", 1000).ok());
  f.Tick(At(1250));
  EXPECT_EQ(backend->calls, std::vector<std::string>{"acquire 1 for fleet-pool/1"});
  EXPECT_EQ(f.StatusJson(At(1250))["pool"], json({{"in_jobs", 4}, {"target", 2}, {"available", 1}, {"on_the_way", 1}}));
  for (int64_t t = 1500; t <= 2000; t += 250) f.Tick(At(t));
  EXPECT_EQ(backend->calls.size(), 1u) << "the same shortfall is not asked for twice";
  // The machine asked for arrives: the pool is full and nothing is on its way.
  ASSERT_TRUE(f.For("m06")->Register(Reg("m06"), At(2100)).ok());
  f.Tick(At(2250));
  EXPECT_EQ(f.StatusJson(At(2250))["pool"]["on_the_way"], 0);
  EXPECT_EQ(f.StatusJson(At(2250))["pool"]["available"], 2);
  EXPECT_EQ(backend->calls.size(), 1u) << ::testing::PrintToString(backend->calls);
}

// A job that waits for machines when the controller dies decides nothing
// new after the reopen; the pool is offered to it all the same, so a
// machine that joins the pool later goes to it.
TEST_F(FleetTest, AJobWaitingWhenTheControllerDiedIsOfferedThePoolAfterTheReopen) {
  const std::vector<std::string> four = {"m01", "m02", "m03", "m04"};
  {
    auto f = Open(1000);
    ASSERT_TRUE(f);
    for (const std::string& m : four) ASSERT_TRUE(f->For(m)->Register(Reg(m), At(1000)).ok());
    ASSERT_TRUE(SubmitJob(*f, "a", 1000).ok());
    ASSERT_TRUE(SubmitJob(*f, "b", 1000).ok());
    ReportAll(*f, four, 1000);
    for (int64_t t = 1250; t <= 3500; t += 250) {
      ReportAll(*f, {"m01", "m03", "m04"}, t);
      f->Tick(At(t));  // m02's lease runs out; the pool is empty
    }
    ASSERT_EQ(Jobs(*f, 3500)["a"]["state"], "waiting for machines");
  }
  auto f = Open(4000);
  ASSERT_TRUE(f);
  ASSERT_EQ(Jobs(*f, 4000)["a"]["state"], "waiting for machines");
  ASSERT_TRUE(f->For("m06")->Register(Reg("m06"), At(4100)).ok());
  f->Tick(At(4250));
  EXPECT_EQ(f->For("m06"), f->Job("a").value()) << "granted to the job that was waiting";
}

// A job's machines are held to the reconnect grace until their first
// report reaches its plane, not to its unlearned 2 s lease from the moment
// it is submitted; once heard there, to the lease.
TEST_F(FleetTest, ANewJobsMachinesGetTheGraceUntilTheyReportToIt) {
  auto f = TwoJobs(1000);
  ASSERT_TRUE(f);
  for (int64_t t = 1250; t <= 4500; t += 250) f->Tick(At(t));
  auto jobs = Jobs(*f, 4500);
  EXPECT_EQ(jobs["a"]["generation"], 1) << "nothing lost 3.5 s after the submit, none heard since";
  EXPECT_EQ(jobs["b"]["generation"], 1);
  ReportAll(*f, all_, 5000);
  for (int64_t t = 5250; t <= 13000; t += 250) {
    ReportAll(*f, {"m01", "m03", "m04", "m05"}, t);
    f->Tick(At(t));
  }
  EXPECT_GT(Jobs(*f, 13000)["a"]["generation"], 1) << "m02, heard at 5 s, then silent past the lease";
}

// The machines handed to a job count as up for its submit while they are
// within the grace: at 12,500 agents in 100 jobs, moving a job's 124
// machines took seconds, and its plane refused the job with 96-120 up.
TEST_F(FleetTest, AJobsPlaneCountsTheMachinesHandedToItAsUp) {
  PlaneOptions o;
  o.db_path = dir_ + "/job.db";
  auto p = Plane::Open(o, At(1000));
  ASSERT_TRUE(p.ok());
  for (const char* m : {"m01", "m02"}) ASSERT_TRUE((*p)->Handover(Reg(m), At(1000)).ok());
  EXPECT_TRUE((*p)->Submit(testing::Launch(), At(4000)).ok()) << "handed over 3 s ago, within the grace";
}

TEST_F(FleetTest, EachJobTakesOnlyWhatItNeedsAndThePoolKeepsTheRest) {
  auto f = TwoJobs(1000);
  ASSERT_TRUE(f);
  auto jobs = Jobs(*f, 1000);
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs["a"]["placement"], json({"m01", "m02"}));
  EXPECT_EQ(jobs["b"]["placement"], json({"m03", "m04"}));
  EXPECT_EQ(jobs["a"]["generation"], 1);
  json s = f->StatusJson(At(1000));
  EXPECT_EQ(s["job"]["name"], "a") << "the key scripts read stays the first job's";
  for (const json& m : s["machines"]) {
    if (m["id"] == "m05") { EXPECT_EQ(m.value("pool", false), true) << m.dump(); }
  }
  // A job too big for what is left is refused, and takes nothing.
  JobLaunch big = testing::Launch();
  big.spec.id = "c";
  big.spec.world_size = 3;
  EXPECT_FALSE(f->Submit(big, true, At(1000)).ok());
  EXPECT_EQ(f->For("m05"), f->main());
  // The single-job kind does not mix with named jobs.
  EXPECT_FALSE(f->Submit(testing::Launch(), false, At(1000)).ok());
}

TEST_F(FleetTest, AFaultInOneJobLeavesTheOtherAloneAndThePoolGoesToTheFirstToAsk) {
  auto f = TwoJobs(1000);
  ASSERT_TRUE(f);
  ReportAll(*f, all_, 1000);  // each heard by its job: held to the lease from now
  // Job a's rank crashes: a restarts, b does not hear of it.
  wire::AgentEvent exit;
  exit.set_kind(wire::AgentEvent::RANK_EXITED);
  exit.set_seq(1);
  exit.set_rank(0);
  exit.set_exit_code(1);
  exit.set_generation(1);
  exit.set_observed_ms(1500);
  ASSERT_TRUE(f->For("m01")->Report(testing::Report("m01", {exit}), At(1500)).ok());
  auto jobs = Jobs(*f, 1500);
  EXPECT_EQ(jobs["a"]["generation"], 2) << jobs["a"].dump();
  EXPECT_EQ(jobs["a"]["incidents"], 1);
  EXPECT_EQ(jobs["b"]["generation"], 1) << jobs["b"].dump();
  EXPECT_EQ(jobs["b"]["incidents"], 0);
  // m03 (job b) falls silent first, m02 (job a) later: b asks the pool
  // first and gets m05; a waits.
  ReportAll(*f, {"m01", "m02", "m04", "m05"}, 3000);
  // The tick runs every 250 ms (a longer gap is the controller's own stall).
  for (int64_t t = 3000; t <= 4500; t += 250) f->Tick(At(t));  // m03's lease (2 s) ran out; the others' did not
  EXPECT_EQ(f->For("m05"), f->Job("b").value()) << "granted to b";
  // It joins b as its agent reports there, as a returned machine does.
  ReportAll(*f, {"m01", "m02", "m04", "m05"}, 4500);
  jobs = Jobs(*f, 4500);
  EXPECT_EQ(jobs["b"]["placement"], json({"m05", "m04"})) << jobs["b"].dump();
  for (int64_t t = 4750; t < 6000; t += 250) f->Tick(At(t));
  ReportAll(*f, {"m01", "m04", "m05"}, 6000);
  for (int64_t t = 6000; t <= 6750; t += 250) f->Tick(At(t));  // m02's lease ran out
  jobs = Jobs(*f, 6750);
  EXPECT_EQ(jobs["a"]["state"], "waiting for machines") << jobs["a"].dump();
  EXPECT_EQ(jobs["b"]["generation"], 2) << "b was not touched by a's loss: " << jobs["b"].dump();
  // A machine that joins the pool later (returned, or its agent back after
  // a controller restart) goes to a, which still waits, though a decides
  // nothing new: the next tick offers it (the two-job cluster test's
  // controller SIGKILL had a wait for a standby that re-registered after
  // the decision).
  ASSERT_TRUE(f->For("m06")->Register(Reg("m06"), At(7000)).ok());
  ReportAll(*f, {"m01", "m04", "m05", "m06"}, 7000);
  f->Tick(At(7250));
  EXPECT_EQ(f->For("m06"), f->Job("a").value()) << "granted to a, which waits";
  ReportAll(*f, {"m01", "m04", "m05", "m06"}, 7500);
  f->Tick(At(7750));
  jobs = Jobs(*f, 7750);
  EXPECT_EQ(jobs["a"]["placement"], json({"m01", "m06"})) << jobs["a"].dump();
  // Filled: a machine joining the pool now stays there.
  ASSERT_TRUE(f->For("m07")->Register(Reg("m07"), At(8000)).ok());
  ReportAll(*f, {"m01", "m04", "m05", "m06", "m07"}, 8000);
  for (int64_t t = 8250; t <= 9000; t += 250) f->Tick(At(t));
  EXPECT_EQ(f->For("m07"), f->main()) << "a has what it needs";
}

TEST_F(FleetTest, AReopenedFleetReplaysEveryJobAndRoutesTheirMachines) {
  {
    auto f = TwoJobs(1000);
    ASSERT_TRUE(f);
  }
  auto f = Open(2000);
  ASSERT_TRUE(f);
  auto jobs = Jobs(*f, 2000);
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs["a"]["placement"], json({"m01", "m02"}));
  EXPECT_EQ(jobs["b"]["placement"], json({"m03", "m04"}));
  EXPECT_EQ(f->For("m03"), f->Job("b").value());
  EXPECT_EQ(f->For("m05"), f->main());
  // The pool's machine is the pool's alone: no job plane lists it.
  const json s = f->StatusJson(At(2000));
  for (const json& m : s["machines"]) {
    if (m["id"] == "m01") { EXPECT_EQ(m["job"], "a"); }
  }
  EXPECT_EQ(f->main()->Machines(), std::vector<MachineId>({"m05"}));
}

// /metrics serves every job's series, each with its job (issue 36 item 3):
// a family is declared once, and the machine families say whose a machine is.
TEST_F(FleetTest, MetricsCarryEveryJobsSeriesWithItsJob) {
  auto f = TwoJobs(1000);
  ASSERT_TRUE(f);
  ReportAll(*f, all_, 1500);
  const std::string text = f->Metrics(At(1600));
  for (const char* family : {"bulwark_machine_state", "bulwark_job_step", "bulwark_incidents_total",
                             "bulwark_controller_uptime_seconds"}) {
    const std::string type = std::string("# TYPE ") + family + " ";
    const size_t first = text.find(type);
    ASSERT_NE(first, std::string::npos) << family;
    EXPECT_EQ(text.find(type, first + 1), std::string::npos) << family << " declared twice:\n" << text;
  }
  for (const char* job : {"a", "b"}) {
    const std::string label = std::string("{job=\"") + job + "\"";
    EXPECT_NE(text.find("\nbulwark_job_step" + label + "} "), std::string::npos) << job << ":\n" << text;
    EXPECT_NE(text.find("\nbulwark_incidents_total" + label + "} "), std::string::npos) << job;
    EXPECT_NE(text.find("\nbulwark_machine_live_ranks" + label + ",machine="), std::string::npos) << job;
  }
  EXPECT_EQ(text.find("job=\"a\",job="), std::string::npos) << "a job's own label is not doubled";
  const std::string path = dir_ + "/metrics.txt";
  std::ofstream(path) << text;
  const testing::ProcessResult r = testing::Run({"/bin/sh", "-c", "promtool check metrics < " + path}, {}, 30);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
}

}  // namespace
}  // namespace bulwark::plane
