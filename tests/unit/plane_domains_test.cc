// Failure domains through the plane (issue 38): a machine's domain travels
// from its agent's registration to the policy and to status, a switch's
// machines whose leases end a report period apart are decided in one tick
// (one incident, one new generation), and they return as standbys when
// their agents report again. Virtual time, no sockets, no sleeps.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "plane/plane.h"
#include "support/agent_messages.h"
#include "support/plane_commands.h"
#include "support/process.h"

namespace bulwark::plane {
namespace {

using nlohmann::json;
using testing::Launch;
using testing::Reg;
using testing::Report;

wire::RegisterRequest RegIn(const std::string& m, const std::string& domain) {
  wire::RegisterRequest r = Reg(m);
  r.set_domain(domain);
  return r;
}

using Racked = std::vector<std::pair<std::string, std::string>>;  // machine, its rack

// A plane whose machines registered with their racks at 1 s, and `job`
// submitted then; null (a test failure) when any step is refused.
std::unique_ptr<Plane> RackedPlane(const PlaneOptions& o, const Racked& machines, const JobLaunch& job) {
  auto p = Plane::Open(o, TimeFromMs(1000));
  if (!p.ok()) return nullptr;
  for (const auto& [m, d] : machines) {
    if (!(*p)->Register(RegIn(m, d), TimeFromMs(1000)).ok()) return nullptr;
  }
  if (!(*p)->Submit(job, TimeFromMs(1000)).ok()) return nullptr;
  return std::move(*p);
}
const Racked kTwoByTwo = {{"m01", "r0"}, {"m02", "r0"}, {"m03", "r1"}, {"m04", "r1"}};

std::string StateOf(const json& status, const std::string& id) {
  for (const json& m : status["machines"]) {
    if (m["id"] == id) return m["state"];
  }
  return "";
}

// Two racks of two: the job (2 ranks) takes one machine from each rack
// (DomainAwareSlots keeps a standby under each switch). r1's switch goes
// down: m03 is last heard at 2.0 s, m04 at 2.5 s, and both leases (2 s)
// have ended by 4.75 s. Decided one by one, m03's loss would hand its slot
// to m04 (alive for half a second more), and m04's loss would undo it.
TEST(PlaneDomains, ASwitchsMachinesAreDecidedInOneTickAndReturnWhenHeardAgain) {
  PlaneOptions o;
  o.db_path = testing::MakeTempDir() + "/c.db";
  std::unique_ptr<Plane> p = RackedPlane(o, kTwoByTwo, Launch());
  ASSERT_TRUE(p);
  Plane& plane = *p;
  json s = plane.StatusJson(TimeFromMs(1000));
  EXPECT_EQ(s["job"]["placement"], json({"m01", "m03"})) << s.dump();
  for (const json& m : s["machines"]) {
    EXPECT_EQ(m.value("rack", ""), m["id"] == "m01" || m["id"] == "m02" ? "r0" : "r1") << m.dump();
  }
  const int64_t gen = s["job"]["generation"];

  // Reports every 500 ms; r1's end at 2.0 s (m03) and 2.5 s (m04). The
  // tick at which each is evicted.
  std::map<std::string, int64_t> evicted_at;
  for (int64_t t = 1500; t <= 8000; t += 250) {
    if (t % 500 == 0) {
      for (const char* m : {"m01", "m02"}) ASSERT_TRUE(plane.Report(Report(m, {}), TimeFromMs(t)).ok());
      if (t <= 2000) { ASSERT_TRUE(plane.Report(Report("m03", {}), TimeFromMs(t)).ok()); }
      if (t <= 2500) { ASSERT_TRUE(plane.Report(Report("m04", {}), TimeFromMs(t)).ok()); }
    }
    plane.Tick(TimeFromMs(t));
    const json now = plane.StatusJson(TimeFromMs(t));
    for (const char* m : {"m03", "m04"}) {
      if (StateOf(now, m) == "evicted" && !evicted_at.count(m)) evicted_at[m] = t;
    }
  }
  // m04's lease ends at the first tick past 4.5 s; m03's, at 4.25 s, waited for it.
  EXPECT_EQ(evicted_at["m03"], 4750);
  EXPECT_EQ(evicted_at["m04"], 4750);
  s = plane.StatusJson(TimeFromMs(8000));
  EXPECT_EQ(s["job"]["placement"], json({"m01", "m02"})) << s.dump();
  EXPECT_EQ(s["job"]["generation"], gen + 1) << "one decision, not a replacement the next tick undid";
  const json incidents = plane.IncidentsJson();
  ASSERT_EQ(incidents.size(), 1u) << incidents.dump();
  EXPECT_NE(incidents[0].dump().find("switch r1: 2 machines lost"), std::string::npos) << incidents.dump();
  EXPECT_EQ(StateOf(s, "m03"), "evicted");
  EXPECT_EQ(StateOf(s, "m04"), "evicted");

  // The switch is back: each agent's next report is its self-check, and
  // the policy returns it as a standby with no operator.
  for (const char* m : {"m03", "m04"}) ASSERT_TRUE(plane.Report(Report(m, {}), TimeFromMs(9000)).ok());
  plane.Tick(TimeFromMs(9000));
  s = plane.StatusJson(TimeFromMs(9000));
  EXPECT_EQ(StateOf(s, "m03"), "standby") << s.dump();
  EXPECT_EQ(StateOf(s, "m04"), "standby") << s.dump();
  EXPECT_EQ(plane.IncidentsJson().size(), 1u);
}

// The elastic job of the cluster test, in virtual time: 4 replicas on two
// racks of three (a standby in each). r1's three machines go silent 0.5 s
// apart; one decision puts the job on r0's three machines (one new
// generation, not a replacement by m06 that the next loss undoes), and a
// controller restarted from the journal decides the same again.
TEST(PlaneDomains, AnElasticJobLosesARackInOneDecisionThatReplayRepeats) {
  PlaneOptions o;
  o.db_path = testing::MakeTempDir() + "/c.db";
  plane::JobLaunch l = Launch();
  l.spec.world_size = 4;
  l.spec.recovery = controller::JobSpec::Recovery::kElastic;
  l.argv = {"/opt/bulwark/bin/bulwark-train"};  // elastic needs ranks that speak it
  std::unique_ptr<Plane> p = RackedPlane(
      o, {{"m01", "r0"}, {"m02", "r0"}, {"m03", "r1"}, {"m04", "r1"}, {"m05", "r0"}, {"m06", "r1"}}, l);
  ASSERT_TRUE(p);
  json s = p->StatusJson(TimeFromMs(1000));
  ASSERT_EQ(s["job"]["placement"], json({"m01", "m02", "m03", "m04"})) << s.dump();
  const int64_t gen = s["job"]["generation"];
  for (int64_t t = 1500; t <= 8000; t += 250) {
    if (t % 500 == 0) {
      for (const char* m : {"m01", "m02", "m05"}) ASSERT_TRUE(p->Report(Report(m, {}), TimeFromMs(t)).ok());
      if (t <= 2000) { ASSERT_TRUE(p->Report(Report("m03", {}), TimeFromMs(t)).ok()); }
      if (t <= 2500) { ASSERT_TRUE(p->Report(Report("m04", {}), TimeFromMs(t)).ok()); }
      if (t <= 2500) { ASSERT_TRUE(p->Report(Report("m06", {}), TimeFromMs(t)).ok()); }
    }
    p->Tick(TimeFromMs(t));
  }
  s = p->StatusJson(TimeFromMs(8000));
  EXPECT_EQ(s["job"]["generation"], gen + 1) << s.dump();
  const json placement = s["job"]["placement"];
  EXPECT_EQ(placement.size(), 3u) << placement.dump();
  for (const json& m : placement) EXPECT_TRUE(m == "m01" || m == "m02" || m == "m05") << placement.dump();
  ASSERT_EQ(p->IncidentsJson().size(), 1u);
  EXPECT_NE(p->IncidentsJson()[0].dump().find("switch r1: 3 machines lost"), std::string::npos)
      << p->IncidentsJson().dump();

  p.reset();
  o.create = false;
  auto again = Plane::Open(o, TimeFromMs(9000));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  const json r = (*again)->StatusJson(TimeFromMs(9000));
  EXPECT_EQ(r["job"]["generation"], gen + 1) << r.dump();
  EXPECT_EQ(r["job"]["placement"], placement);
  EXPECT_EQ((*again)->IncidentsJson().size(), 1u);
}

// A machine whose rack-mates are all heard from is no burst: its loss is
// decided when its own lease ends, not a moment later.
TEST(PlaneDomains, ALoneLossInARackIsNotHeldBack) {
  PlaneOptions o;
  o.db_path = testing::MakeTempDir() + "/c.db";
  std::unique_ptr<Plane> p = RackedPlane(o, kTwoByTwo, Launch());
  ASSERT_TRUE(p);
  Plane& plane = *p;
  const int64_t gen = plane.StatusJson(TimeFromMs(1000))["job"]["generation"];
  int64_t decided_at = -1;
  for (int64_t t = 1500; t <= 6000 && decided_at < 0; t += 250) {
    if (t % 500 == 0) {
      for (const char* m : {"m01", "m02", "m04"}) ASSERT_TRUE(plane.Report(Report(m, {}), TimeFromMs(t)).ok());
      if (t <= 2000) { ASSERT_TRUE(plane.Report(Report("m03", {}), TimeFromMs(t)).ok()); }
    }
    plane.Tick(TimeFromMs(t));
    if (plane.StatusJson(TimeFromMs(t))["job"]["generation"] > gen) decided_at = t;
  }
  EXPECT_EQ(decided_at, 4250) << "m03's lease (2 s from 2.0 s) ends at the first tick past 4.0 s";
  EXPECT_EQ(plane.IncidentsJson()[0].dump().find("switch r1"), std::string::npos) << plane.IncidentsJson().dump();
}

// A standby's reach probe (due 5 s after its last) that its switch cut
// short: the probe began while m04 reported (5.7 s), and failed 2 s later, by when m04 had been silent
// for 2 s. It is not held against m04 (an unreachable address is a machine
// that still reports), so the domain's rule, not the probe, decides it.
// The two-by-two racks with reach probes, every machine reporting at 5.5 s.
std::unique_ptr<Plane> ProbedPlane() {
  PlaneOptions o;
  o.db_path = testing::MakeTempDir() + "/c.db";
  o.probe_reachability = true;
  auto p = Plane::Open(o, TimeFromMs(1000));
  if (!p.ok()) return nullptr;
  for (const auto& [m, d] : kTwoByTwo) {
    wire::RegisterRequest r = RegIn(m, d);
    r.set_shard_addr("10.0.0." + m.substr(2) + ":7000");
    if (!(*p)->Register(r, TimeFromMs(1000)).ok()) return nullptr;
  }
  if (!(*p)->Submit(Launch(), TimeFromMs(1000)).ok()) return nullptr;
  for (const auto& [m, d] : kTwoByTwo) {
    if (!(*p)->Report(Report(m, {}), TimeFromMs(5500)).ok()) return nullptr;
  }
  return std::move(*p);
}

TEST(PlaneDomains, AProbeCutShortBySilenceIsNotHeldAgainstTheMachine) {
  std::unique_ptr<Plane> p = ProbedPlane();
  ASSERT_TRUE(p);
  bool probed = false;
  for (const Plane::ReachProbe& probe : p->ProbesDue(TimeFromMs(5600))) {
    if (probe.machine != "m04") continue;
    probed = true;
    ASSERT_TRUE(p->Report(Report("m04", {}), TimeFromMs(5700)).ok());
    p->ProbeDone(probe, Status::Unavailable("connecting to shard server 10.0.0.4:7000: timed out"), TimeFromMs(7700));
  }
  ASSERT_TRUE(probed) << "m04, a standby, is probed";
  EXPECT_EQ(StateOf(p->StatusJson(TimeFromMs(7700)), "m04"), "standby");
}

// The racks cluster test's m06 again, when the switch comes back within
// the probe: the probe began while m04 reported (5.6 s), the switch took
// r1 down, the lease evicted it, the switch came back and m04 registered
// again (10 s) as a standby, and only then did the probe fail (10.1 s). It
// tested the machine before its loss: m04 stays a standby.
TEST(PlaneDomains, AProbeOfAMachineLostAndBackMeanwhileIsNotHeldAgainstIt) {
  std::unique_ptr<Plane> p = ProbedPlane();
  ASSERT_TRUE(p);
  std::optional<Plane::ReachProbe> probe;
  for (const Plane::ReachProbe& due : p->ProbesDue(TimeFromMs(5600))) {
    if (due.machine == "m04") probe = due;
  }
  ASSERT_TRUE(probe) << "m04, a standby, is probed";
  for (int64_t t = 5750; t <= 9750; t += 250) {
    if (t % 500 == 0) {
      for (const char* m : {"m01", "m02"}) ASSERT_TRUE(p->Report(Report(m, {}), TimeFromMs(t)).ok());
    }
    p->Tick(TimeFromMs(t));
  }
  ASSERT_EQ(StateOf(p->StatusJson(TimeFromMs(9750)), "m04"), "evicted") << "lost with its switch";
  for (const char* m : {"m01", "m02", "m03", "m04"}) ASSERT_TRUE(p->Report(Report(m, {}), TimeFromMs(10000)).ok());
  p->Tick(TimeFromMs(10000));
  ASSERT_EQ(StateOf(p->StatusJson(TimeFromMs(10000)), "m04"), "standby") << "back with its switch";
  p->ProbeDone(*probe, Status::Unavailable("connecting to 10.0.0.4:7000: no answer within 2 s"), TimeFromMs(10100));
  EXPECT_EQ(StateOf(p->StatusJson(TimeFromMs(10100)), "m04"), "standby");
}

}  // namespace
}  // namespace bulwark::plane
