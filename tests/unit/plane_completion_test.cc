// A job that ends is done: the plane completes a job once every rank of the
// current generation exited 0, whatever the ranks printed (a foreign job has
// no done line), at the last step any rank was seen at.
#include <gtest/gtest.h>

#include <map>

#include "plane/plane.h"
#include "support/agent_messages.h"
#include "support/plane_commands.h"
#include "support/process.h"

namespace bulwark::plane {
namespace {

using testing::DeviceFailed;
using testing::Launch;
using testing::Reg;
using testing::Report;
using testing::Step;

// --- a job that ends is done ----------------------------------------------

using nlohmann::json;

// A report of `m`'s ranks of generation `gen` that exited 0, after which step.
wire::ReportRequest Finished(const std::string& m, int64_t gen, std::map<int, int64_t> ranks,
                             std::vector<wire::AgentEvent> events = {}) {
  wire::ReportRequest r = Report(m, std::move(events));
  r.set_generation(gen);
  for (const auto& [rank, step] : ranks) {
    wire::FinishedRank* f = r.add_finished();
    f->set_rank(rank);
    f->set_step(step);
  }
  return r;
}

wire::AgentEvent Exited(int64_t seq, int rank, int code, int64_t gen, int64_t at_ms) {
  wire::AgentEvent e;
  e.set_kind(wire::AgentEvent::RANK_EXITED);
  e.set_seq(seq);
  e.set_rank(rank);
  e.set_exit_code(code);
  e.set_generation(gen);
  e.set_observed_ms(at_ms);
  return e;
}

TEST(Plane, AJobIsCompleteOnceEveryRankExitedZeroAtTheLastStepSeen) {
  PlaneOptions o;
  o.db_path = testing::MakeTempDir() + "/c.db";
  {
    auto p = Plane::Open(o, TimeFromMs(1000));
    ASSERT_TRUE(p.ok());
    for (const char* m : {"m01", "m02"}) ASSERT_TRUE((*p)->Register(Reg(m), TimeFromMs(1000)).ok());
    ASSERT_TRUE((*p)->Submit(Launch(), TimeFromMs(1000)).ok());
    ASSERT_TRUE((*p)->Report(Report("m01", {Step(1, 30, 1, 2000)}), TimeFromMs(2000)).ok());
    // Rank 0 ended; rank 1 still trains: the job runs on, waiting for it.
    ASSERT_TRUE((*p)->Report(Finished("m01", 1, {{0, 30}}), TimeFromMs(3000)).ok());
    ASSERT_TRUE((*p)->Report(Finished("m02", 1, {}), TimeFromMs(3000)).ok());
    json s = (*p)->StatusJson(TimeFromMs(3000));
    EXPECT_EQ(s["job"]["state"], "running") << s.dump();
    EXPECT_TRUE(s["job"]["done_step"].is_null());
    // Rank 1 went two steps further before it ended: the last step seen.
    ASSERT_TRUE((*p)->Report(Finished("m02", 1, {{1, 32}}), TimeFromMs(3500)).ok());
    s = (*p)->StatusJson(TimeFromMs(3500));
    EXPECT_EQ(s["job"]["state"], "completed") << s.dump();
    EXPECT_EQ(s["job"]["done_step"], 32);
    EXPECT_EQ(s["job"]["done_why"], "every rank of generation 1 exited 0");
    // Finished: a later exit or fault of its machines is no incident.
    ASSERT_TRUE((*p)->Report(Report("m02", {DeviceFailed(1, 4000)}), TimeFromMs(4000)).ok());
    (*p)->Tick(TimeFromMs(60000));
    EXPECT_EQ((*p)->IncidentsJson().size(), 0u);
  }
  o.create = false;
  auto p = Plane::Open(o, TimeFromMs(70000));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  json s = (*p)->StatusJson(TimeFromMs(70000));
  EXPECT_EQ(s["job"]["state"], "completed") << s.dump();
  EXPECT_EQ(s["job"]["done_step"], 32);
  EXPECT_EQ(s["job"]["done_why"], "every rank of generation 1 exited 0");
}

TEST(Plane, AJobWhoseRanksExitZeroBeforeAnyStepIsCompleteAtStepZeroAndSaysSo) {
  PlaneOptions o;
  o.db_path = testing::MakeTempDir() + "/c.db";
  auto p = Plane::Open(o, TimeFromMs(1000));
  ASSERT_TRUE(p.ok());
  for (const char* m : {"m01", "m02"}) ASSERT_TRUE((*p)->Register(Reg(m), TimeFromMs(1000)).ok());
  ASSERT_TRUE((*p)->Submit(Launch(), TimeFromMs(1000)).ok());
  ASSERT_TRUE((*p)->Report(Finished("m01", 1, {{0, 0}}), TimeFromMs(2000)).ok());
  ASSERT_TRUE((*p)->Report(Finished("m02", 1, {{1, 0}}), TimeFromMs(2000)).ok());
  json s = (*p)->StatusJson(TimeFromMs(2000));
  EXPECT_EQ(s["job"]["state"], "completed") << s.dump();
  EXPECT_EQ(s["job"]["done_step"], 0);
  EXPECT_EQ(s["job"]["done_why"], "every rank of generation 1 exited 0 before any step was seen");
}

// A rank that failed after its peer ended restarts the job; the ranks that
// ended in the old generation are not this one's, and the new generation,
// resumed at the job's final step, ends at once and completes it there.
TEST(Plane, ARestartResumedAtTheFinalStepCompletesAgainInsteadOfLooping) {
  PlaneOptions o;
  o.db_path = testing::MakeTempDir() + "/c.db";
  auto p = Plane::Open(o, TimeFromMs(1000));
  ASSERT_TRUE(p.ok());
  for (const char* m : {"m01", "m02", "s01"}) ASSERT_TRUE((*p)->Register(Reg(m), TimeFromMs(1000)).ok());
  ASSERT_TRUE((*p)->Submit(Launch(), TimeFromMs(1000)).ok());
  json s = (*p)->StatusJson(TimeFromMs(1000));
  const std::string r0 = s["job"]["placement"][0], r1 = s["job"]["placement"][1];
  ASSERT_TRUE((*p)->Report(Report(r0, {Step(1, 20, 1, 2000)}), TimeFromMs(2000)).ok());
  ASSERT_TRUE((*p)->Report(Finished(r0, 1, {{0, 20}}), TimeFromMs(3000)).ok());
  ASSERT_TRUE((*p)->Report(Finished(r1, 1, {}, {Exited(1, 1, 3, 1, 3000)}), TimeFromMs(3000)).ok());
  s = (*p)->StatusJson(TimeFromMs(3000));
  ASSERT_EQ(s["job"]["generation"], 2) << s.dump();
  ASSERT_EQ((*p)->IncidentsJson().size(), 1u);
  const std::string n0 = s["job"]["placement"][0], n1 = s["job"]["placement"][1];
  // Old-generation news of rank 0 and the new rank 1's end: not every rank of generation 2.
  ASSERT_TRUE((*p)->Report(Finished(n1, 2, {{1, 0}}), TimeFromMs(4000)).ok());
  if (n0 != n1) { ASSERT_TRUE((*p)->Report(Finished(n0, 1, {{0, 20}}), TimeFromMs(4000)).ok()); }
  EXPECT_EQ((*p)->StatusJson(TimeFromMs(4000))["job"]["state"], "restarting");
  // Resumed at step 20, rank 0 printed no step and ended: complete at 20.
  ASSERT_TRUE((*p)->Report(Finished(n0, 2, {{0, 0}}), TimeFromMs(4500)).ok());
  s = (*p)->StatusJson(TimeFromMs(4500));
  EXPECT_EQ(s["job"]["state"], "completed") << s.dump();
  EXPECT_EQ(s["job"]["done_step"], 20);
  EXPECT_EQ(s["job"]["generation"], 2);
  EXPECT_EQ((*p)->IncidentsJson().size(), 1u);
}

}  // namespace
}  // namespace bulwark::plane
