// Which of the policy's decisions the cluster manager hears about
// (plane/plane_backend.cc), with a recording backend in place of Slurm.
#include <gtest/gtest.h>

#include "plane/plane.h"
#include "support/agent_messages.h"
#include "support/process.h"

namespace bulwark::plane {
namespace {

using testing::DeviceFailed;
using testing::Reg;
using testing::Report;
using testing::Step;

struct Recorder : cluster::Backend {
  std::vector<std::string> calls;
  void Drain(const std::string& m, const std::string& reason) override { calls.push_back("drain " + m + ": " + reason); }
  void Resume(const std::string& m, bool start_agent) override {
    calls.push_back("resume " + m + (start_agent ? " +agent" : ""));
  }
  void Acquire(const std::string& request, int count) override {
    calls.push_back("acquire " + std::to_string(count) + " for " + request);
  }
};

JobLaunch Launch() {
  JobLaunch l;
  l.spec.id = "llm";
  l.spec.world_size = 2;
  l.argv = {"/bin/true"};
  return l;
}

PlaneOptions Options(const std::shared_ptr<Recorder>& backend, const std::string& db) {
  PlaneOptions o;
  o.db_path = db;
  // A standby target of 1 for a two-machine job (the default rate gives 0).
  o.policy.daily_failure_rate = 0.06;
  o.backend = backend;
  return o;
}

TEST(PlaneBackend, EvictionDrainsWithTheIncidentShortfallAcquiresOnceReturnResumes) {
  const std::string db = testing::MakeTempDir() + "/c.db";
  auto backend = std::make_shared<Recorder>();
  {
    auto p = Plane::Open(Options(backend, db), TimeFromMs(1000));
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    for (const char* m : {"m01", "m02", "m03"}) ASSERT_TRUE((*p)->Register(Reg(m), TimeFromMs(1000)).ok());
    ASSERT_TRUE((*p)->Submit(Launch(), TimeFromMs(1100)).ok());
    EXPECT_TRUE(backend->calls.empty()) << "a full pool asks for nothing";
    ASSERT_TRUE((*p)->Report(Report("m01", {Step(1, 5, 1, 2000)}), TimeFromMs(2000)).ok());
    ASSERT_TRUE((*p)->Report(Report("m02", {DeviceFailed(1, 3000)}), TimeFromMs(3000)).ok());
    ASSERT_EQ(backend->calls.size(), 2u) << ::testing::PrintToString(backend->calls);
    EXPECT_EQ(backend->calls[0].rfind("drain m02: job llm incident 1: ", 0), 0u) << backend->calls[0];
    EXPECT_EQ(backend->calls[1].rfind("acquire 1 for replenish/", 0), 0u) << backend->calls[1];
    // More steps reconcile again: the same shortfall is not asked for twice.
    ASSERT_TRUE((*p)->Report(Report("m01", {Step(2, 9, 2, 4000)}), TimeFromMs(4000)).ok());
    EXPECT_EQ(backend->calls.size(), 2u) << ::testing::PrintToString(backend->calls);
  }
  // A restarted controller replays its journal without repeating decisions,
  // and says once more that the evicted machine is drained (a drain still
  // pending when the old one died would be lost otherwise).
  backend->calls.clear();
  PlaneOptions o = Options(backend, db);
  o.create = false;
  {
    auto p = Plane::Open(o, TimeFromMs(5000));
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    ASSERT_EQ(backend->calls.size(), 1u) << ::testing::PrintToString(backend->calls);
    EXPECT_EQ(backend->calls[0].rfind("drain m02: job llm incident 1: ", 0), 0u) << backend->calls[0];
    // m02's agent was last heard before the restart: by 20 s it is gone,
    // so the manager is asked to start one. The return's reconcile is this
    // controller's first: it asks again for the shortfall still open (the
    // Slurm backend's --grow count, kept on disk, bounds what that costs).
    ASSERT_TRUE((*p)->ReturnMachine("m02", TimeFromMs(20000)).ok());
    ASSERT_EQ(backend->calls.size(), 3u) << ::testing::PrintToString(backend->calls);
    EXPECT_EQ(backend->calls[1].rfind("acquire 1 for replenish/", 0), 0u) << backend->calls[1];
    EXPECT_EQ(backend->calls[2], "resume m02 +agent");
  }
  // Returned: nothing is evicted, nothing to say after the next restart.
  backend->calls.clear();
  auto p = Plane::Open(o, TimeFromMs(30000));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_TRUE(backend->calls.empty()) << ::testing::PrintToString(backend->calls);
}

}  // namespace
}  // namespace bulwark::plane
