// Releases and requeue mode through the plane (plane_releases.cc): what each
// release runs is journaled and survives a controller restart, restarts
// launch the release the policy names, bad updates change nothing, and the
// tick drives forced updates and requeue delays.
#include <gtest/gtest.h>

#include "plane/codec.h"
#include "plane/plane.h"
#include "support/agent_messages.h"
#include "support/plane_commands.h"
#include "support/process.h"

namespace bulwark::plane {
namespace {

using testing::Desired;
using testing::DeviceFailed;
using testing::Reg;
using testing::Report;
using testing::Step;

JobLaunch Launch() {
  JobLaunch l;
  l.spec.id = "demo";
  l.spec.world_size = 2;
  l.argv = {"/bin/true"};
  return l;
}

Release V2(bool now) {
  Release r;
  r.argv = {"/bin/echo", "v2"};
  r.env = {{"LOSS_SCALE", "2"}};
  r.now = now;
  r.who = "ops@host";
  r.why = "fix the loader";
  return r;
}


std::vector<std::string> Argv(const wire::Command& c) { return {c.argv().begin(), c.argv().end()}; }

std::unique_ptr<Plane> Started(PlaneOptions o, JobLaunch launch = Launch()) {
  auto p = Plane::Open(o, TimeFromMs(1000));
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  for (const char* m : {"m01", "m02", "m03"}) EXPECT_TRUE((*p)->Register(Reg(m), TimeFromMs(1000)).ok());
  auto id = (*p)->Submit(std::move(launch), TimeFromMs(1100));
  EXPECT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_TRUE((*p)->Report(Report("m01", {Step(1, 5, 1, 2000)}), TimeFromMs(2000)).ok());
  return std::move(*p);
}

TEST(PlaneReleases, UpdateNowRestartsInPlaceWithTheNewCommandAndSurvivesARestart) {
  PlaneOptions o;
  o.db_path = testing::MakeTempDir() + "/c.db";
  {
    std::unique_ptr<Plane> p = Started(o);
    Result<int> n = p->Update(V2(true), Launch().spec, TimeFromMs(3000));
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(*n, 2);
    // First the machines stage it beside the running ranks...
    const wire::Command stage = Desired(*p, "m01", 3050);
    EXPECT_EQ(stage.kind(), wire::Command::STAGE_RELEASE);
    EXPECT_EQ(stage.release(), 2);
    EXPECT_EQ(Argv(stage), (std::vector<std::string>{"/bin/echo", "v2"}));
    EXPECT_EQ(stage.env().at("LOSS_SCALE"), "2");
    EXPECT_EQ(p->StatusJson(TimeFromMs(3050))["job"]["generation"], 1) << "no restart yet";
    // ...then, every machine answered, the job restarts on it.
    for (const char* m : {"m01", "m02"}) {
      wire::AgentEvent e;
      e.set_kind(wire::AgentEvent::RELEASE_STAGED);
      e.set_seq(std::string(m) == "m01" ? 2 : 1);
      e.set_release(2);
      e.set_staged(true);
      e.set_observed_ms(3080);
      ASSERT_TRUE(p->Report(Report(m, {e}), TimeFromMs(3080)).ok());
    }
    const wire::Command c = Desired(*p, "m01", 3100);
    EXPECT_EQ(c.kind(), wire::Command::START_RANKS);
    EXPECT_EQ(c.generation(), 2);
    EXPECT_EQ(Argv(c), (std::vector<std::string>{"/bin/echo", "v2"}));
    EXPECT_EQ(c.env().at("LOSS_SCALE"), "2");
    EXPECT_EQ(p->StatusJson(TimeFromMs(3100))["job"]["placement"].dump(), "[\"m01\",\"m02\"]") << "same machines";
  }
  // A controller killed after the update comes back with it (the journal).
  o.create = false;
  auto p = Plane::Open(o, TimeFromMs(5000));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const nlohmann::json r = (*p)->ReleasesJson();
  ASSERT_EQ(r["releases"].size(), 2u) << r.dump();
  EXPECT_EQ(r["applied"], 2);
  EXPECT_EQ(r["releases"][1]["who"], "ops@host");
  EXPECT_EQ(r["releases"][1]["why"], "fix the loader");
  EXPECT_EQ(r["releases"][1]["state"], "running");
  // The replayed restart goes out once the job's machines have reported
  // what they hold (Plane::HeldLocked).
  for (const char* m : {"m01", "m02"}) {
    ASSERT_TRUE((*p)->Register(Reg(m), TimeFromMs(5050)).ok());
    ASSERT_TRUE((*p)->Report(Report(m, {}), TimeFromMs(5050)).ok());
  }
  (*p)->Tick(TimeFromMs(5060));
  EXPECT_EQ(Argv(Desired(**p, "m02", 5100)), (std::vector<std::string>{"/bin/echo", "v2"}));
  // A rollback goes back to the submitted command, on the same machines.
  ASSERT_TRUE((*p)->Rollback(0, "loss diverged", TimeFromMs(6000)).ok());
  const wire::Command back = Desired(**p, "m01", 6100);
  EXPECT_EQ(back.generation(), 3);
  EXPECT_EQ(Argv(back), (std::vector<std::string>{"/bin/true"}));
  EXPECT_EQ((*p)->ReleasesJson()["releases"][1]["state"], "rolled back");
}

TEST(PlaneReleases, BadUpdatesAndRollbacksLeaveTheJobUntouched) {
  PlaneOptions o;
  o.db_path = testing::MakeTempDir() + "/c.db";
  std::unique_ptr<Plane> p = Started(o);
  JobSpec other = Launch().spec;
  other.id = "other";
  Result<int> wrong_job = p->Update(V2(true), other, TimeFromMs(3000));
  ASSERT_FALSE(wrong_job.ok());
  EXPECT_NE(wrong_job.status().message().find("this cluster runs 'demo'"), std::string::npos)
      << wrong_job.status().ToString();
  JobSpec bigger = Launch().spec;
  bigger.world_size = 4;
  Result<int> reshaped = p->Update(V2(true), bigger, TimeFromMs(3000));
  ASSERT_FALSE(reshaped.ok());
  EXPECT_NE(reshaped.status().message().find("cannot change world_size (2 -> 4)"), std::string::npos)
      << reshaped.status().ToString();
  Status past_first = p->Rollback(0, "", TimeFromMs(3000));
  ASSERT_FALSE(past_first.ok());
  EXPECT_NE(past_first.message().find("no earlier release"), std::string::npos) << past_first.ToString();
  EXPECT_FALSE(p->Rollback(9, "", TimeFromMs(3000)).ok());
  const nlohmann::json s = p->StatusJson(TimeFromMs(3100));
  EXPECT_EQ(s["job"]["generation"], 1);
  EXPECT_EQ(p->ReleasesJson()["releases"].size(), 1u);
  EXPECT_EQ(Argv(Desired(*p, "m01", 3100)), (std::vector<std::string>{"/bin/true"}));
}

TEST(PlaneReleases, TheTickForcesALazyReleaseAfterItsAge) {
  PlaneOptions o;
  o.db_path = testing::MakeTempDir() + "/c.db";
  o.policy.update_force_after = std::chrono::seconds(2);
  std::unique_ptr<Plane> p = Started(o);
  ASSERT_TRUE(p->Update(V2(false), Launch().spec, TimeFromMs(3000)).ok());
  for (const char* m : {"m01", "m02", "m03"}) ASSERT_TRUE(p->Report(Report(m, {}), TimeFromMs(4000)).ok());
  p->Tick(TimeFromMs(4000));
  EXPECT_EQ(Desired(*p, "m01", 4100).generation(), 1) << "not yet due";
  for (const char* m : {"m01", "m02", "m03"}) ASSERT_TRUE(p->Report(Report(m, {}), TimeFromMs(5100)).ok());
  p->Tick(TimeFromMs(5100));
  const wire::Command c = Desired(*p, "m01", 5200);
  EXPECT_EQ(c.generation(), 2);
  EXPECT_EQ(Argv(c), (std::vector<std::string>{"/bin/echo", "v2"}));
}

TEST(PlaneReleases, RequeueStopsEveryRankThenRestartsOnFreshMachinesAfterTheDelay) {
  PlaneOptions o;
  o.db_path = testing::MakeTempDir() + "/c.db";
  JobLaunch l = Launch();
  l.spec.recovery = JobSpec::Recovery::kRequeue;
  l.spec.provisioning_delay = std::chrono::milliseconds(1500);
  std::unique_ptr<Plane> p = Started(o, l);
  ASSERT_TRUE(p->Report(Report("m02", {DeviceFailed(1, 3000)}), TimeFromMs(3000)).ok());
  EXPECT_EQ(Desired(*p, "m01", 3100).kind(), wire::Command::STOP_RANKS) << "every rank stops";
  for (const char* m : {"m01", "m03"}) ASSERT_TRUE(p->Report(Report(m, {}), TimeFromMs(4000)).ok());
  p->Tick(TimeFromMs(4000));
  EXPECT_EQ(Desired(*p, "m01", 4100).kind(), wire::Command::STOP_RANKS) << "machines not back yet";
  for (const char* m : {"m01", "m03"}) ASSERT_TRUE(p->Report(Report(m, {}), TimeFromMs(4600)).ok());
  p->Tick(TimeFromMs(4600));
  const wire::Command c = Desired(*p, "m01", 4700);
  ASSERT_EQ(c.kind(), wire::Command::START_RANKS);
  EXPECT_TRUE(c.fresh_machines());
  EXPECT_EQ(c.restore_from_size(), 0) << "nothing survives on a machine given back";
  EXPECT_EQ(p->IncidentsJson()[0]["resolution"], "requeued");
}

}  // namespace
}  // namespace bulwark::plane
