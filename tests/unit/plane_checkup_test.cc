// Checkups through the plane (issue 38, policy_checkup.cc): a machine a
// hang's group took on suspicion gets the ladder's tests as a DIAGNOSE
// one-shot to its agent alone, and its answer returns it to the pool as a
// standby. Virtual time, no sockets, no sleeps.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "controller/stack_analyzer.h"
#include "plane/plane.h"
#include "support/agent_messages.h"
#include "support/plane_commands.h"
#include "support/process.h"
#include "support/step_reports.h"

namespace bulwark::plane {
namespace {

using controller::TimeFromMs;
using nlohmann::json;
using testing::Launch;
using testing::Reg;
using testing::Report;
using testing::StepReport;

const std::vector<std::string> kMachines = {"m01", "m02", "m03", "m04", "m05", "m06"};

std::string StateOf(const json& status, const std::string& id) {
  for (const json& m : status["machines"]) {
    if (m["id"] == id) return m["state"];
  }
  return "";
}

// The stacks a TRACE asks for: rank 3 spins in its loss while the others
// wait in the all-reduce for it.
wire::StacksRequest Stacks(const std::string& m, int rank, const std::string& trace) {
  static const std::vector<std::string> kWait = {
      "__futex_abstimed_wait_common", "pthread_cond_wait@@GLIBC_2.3.2",
      "c10d::Work::wait(std::chrono::duration<long, std::ratio<1l, 1000l> >)",
      "bulwark::trainer::Comm::AllReduceSum(std::vector<at::Tensor, std::allocator<at::Tensor> >&)",
      "bulwark::trainer::Train(bulwark::trainer::TrainConfig const&)", "main"};
  static const std::vector<std::string> kSpin = {
      "__expf_fma", "bulwark::trainer::kernels::CrossEntropy(at::Tensor const&, at::Tensor const&)",
      "bulwark::trainer::TransformerImpl::Loss(at::Tensor const&, at::Tensor const&)",
      "bulwark::trainer::Train(bulwark::trainer::TrainConfig const&)", "main"};
  wire::StacksRequest req;
  req.set_machine(m);
  req.set_trace(trace);
  wire::RankStack* s = req.add_stacks();
  s->set_rank(rank);
  s->set_pid(100 + rank);
  s->set_text(controller::EuStackText(100 + rank, rank == 3 ? kSpin : kWait));
  return req;
}

// The one-shots queued for `m` (TRACE, DIAGNOSE, ...), as its stream reads
// them, until the one of `kind`; nullopt when none came.
std::optional<wire::Command> OneShot(Plane& p, const std::string& m, wire::Command::Kind kind, int64_t at_ms) {
  const int64_t stream = p.OpenStream(m);
  std::string sent;
  bool superseded = false;
  for (int i = 0; i < 8; ++i) {
    std::optional<wire::Command> c = p.NextCommand(m, stream, &sent, TimeFromMs(at_ms), &superseded);
    if (!c) return std::nullopt;
    if (c->kind() == kind) return c;
  }
  return std::nullopt;
}

TEST(PlaneCheckup, AMachineOverEvictedForAHangIsCheckedAndComesBackAsAStandby) {
  PlaneOptions o;
  o.db_path = testing::MakeTempDir() + "/c.db";
  o.policy.checkup_evicted = true;
  auto opened = Plane::Open(o, TimeFromMs(1000));
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Plane& p = **opened;
  for (const std::string& m : kMachines) ASSERT_TRUE(p.Register(Reg(m), TimeFromMs(1000)).ok());
  JobLaunch l = Launch();
  l.spec.world_size = 4;
  ASSERT_TRUE(p.Submit(l, TimeFromMs(1000)).ok());
  json s = p.StatusJson(TimeFromMs(1000));
  ASSERT_EQ(s["job"]["placement"], json({"m01", "m02", "m03", "m04"})) << s.dump();
  const int64_t gen = s["job"]["generation"];

  // Ten steps of 1 s, then none: m04's rank spins. Every agent reports
  // every 500 ms throughout, so no machine is lost for silence.
  std::map<std::string, int64_t> seq;
  std::string trace;
  int64_t t = 1000;
  while (trace.empty() && t < 40000) {
    t += 500;
    const int64_t step = t <= 11000 && t % 1000 == 0 ? t / 1000 - 1 : 0;
    for (size_t i = 0; i < kMachines.size(); ++i) {
      const std::string& m = kMachines[i];
      wire::ReportRequest r = step > 0 && i < 4 ? StepReport(m, static_cast<int>(i), step, gen, t, 1000) : Report(m, {});
      if (step > 0 && i == 0) *r.add_events() = testing::Step(++seq[m], step, gen, t);
      ASSERT_TRUE(p.Report(r, TimeFromMs(t)).ok()) << m << " at " << t;
    }
    p.Tick(TimeFromMs(t));
    s = p.StatusJson(TimeFromMs(t));
    const json& tracing = s["job"]["detectors"]["tracing"];
    if (tracing.is_string()) trace = tracing.get<std::string>();
  }
  ASSERT_FALSE(trace.empty()) << "no hang detected: " << s.dump();
  for (int rank = 0; rank < 4; ++rank) {
    ASSERT_TRUE(p.UploadStacks(Stacks(kMachines[rank], rank, trace), TimeFromMs(t + 100)).ok());
  }
  t += 100;
  s = p.StatusJson(TimeFromMs(t));
  EXPECT_EQ(StateOf(s, "m04"), "evicted") << s.dump();
  for (const char* m : {"m01", "m02", "m03"}) EXPECT_EQ(StateOf(s, m), "active") << m << ": " << s.dump();

  // The checkup: the ladder's tests to m04 alone, as a one-shot.
  std::optional<wire::Command> diagnose = OneShot(p, "m04", wire::Command::DIAGNOSE, t);
  ASSERT_TRUE(diagnose.has_value()) << "m04 was sent no DIAGNOSE";
  EXPECT_EQ(diagnose->tests_size(), 3) << diagnose->DebugString();
  EXPECT_GT(diagnose->incident(), 0);
  for (const char* m : {"m01", "m02", "m03"}) {
    EXPECT_FALSE(OneShot(p, m, wire::Command::DIAGNOSE, t).has_value()) << m << " is no part of the checkup";
  }

  // Every test passed: m04 is a standby again, with no operator.
  wire::AgentEvent answer;
  answer.set_kind(wire::AgentEvent::DIAGNOSTICS);
  answer.set_seq(++seq["m04"]);
  answer.set_incident(diagnose->incident());
  t += 400;  // within the lease of its last report
  answer.set_observed_ms(t);
  for (const std::string& t : diagnose->tests()) {
    wire::TestResult* r = answer.add_results();
    r->set_test(t);
    r->set_passed(true);
    r->set_ms(100);
  }
  ASSERT_TRUE(p.Report(Report("m04", {answer}), TimeFromMs(t)).ok());
  p.Tick(TimeFromMs(t));
  s = p.StatusJson(TimeFromMs(t));
  EXPECT_EQ(StateOf(s, "m04"), "standby") << s.dump();
}

}  // namespace
}  // namespace bulwark::plane
