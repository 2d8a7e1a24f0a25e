// One trace of agents' reports, through the plane's path (Plane::Report and
// Tick, as the service drives them) and through the simulator's
// (sim::Heartbeats, as FleetSim drives it): the same machines are lost at
// the same ticks, because both ask the core's LivenessDetector (issue 62).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "plane/plane.h"
#include "sim/heartbeats.h"
#include "support/agent_messages.h"
#include "support/plane_commands.h"
#include "support/process.h"

namespace bulwark::controller {
namespace {

constexpr int kMachines = 48;
constexpr int64_t kStart = 1000, kEnd = 30000, kTick = 250;

std::string Id(int i) {
  char id[16];
  std::snprintf(id, sizeof id, "m%05d", i);
  return id;
}
std::string HostOf(int i) { return "10.0." + std::to_string(i / 250) + "." + std::to_string(i % 250); }
// m00045-m00048 sit under one switch (rack r1); the others have no domain.
std::string DomainOf(int i) { return i >= 45 ? "r1" : ""; }

LivenessOptions Rule() {
  LivenessOptions o;
  o.heartbeat_timeout = std::chrono::milliseconds(4000);  // longer than closed_peer_timeout: the shortcut shows
  o.closed_peer_timeout = std::chrono::milliseconds(2000);
  o.reconnect_grace = std::chrono::milliseconds(10000);
  return o;
}

sim::Heartbeats::Options SimOptions() {
  sim::Heartbeats::Options o;
  o.liveness = Rule();
  o.seed = 1;
  return o;
}

// The trace. m00001 dies at 3 s. m00002 dies at 6 s, and m00003's reports
// from then on say its connections to m00002 closed. m00005-m00044 fall
// silent together at 12 s (a mass silence) and come back at 18 s, but for
// m00005 and m00006, the stragglers, who never do. Rack r1's switch fails
// at 24 s: its four machines fall silent together, their last reports up
// to a report period apart, and are lost in one tick (the domain skew).
bool Silent(int i, int64_t t) {
  if (i >= 45) return t > 24000;
  if (i == 1) return t > 3000;
  if (i == 2) return t > 6000;
  if (i == 5 || i == 6) return t > 12000;
  if (i >= 7 && i <= 44) return t > 12000 && t < 18000;
  return false;
}
bool NamesClosed(int i, int64_t t) { return i == 3 && t > 6000; }

// Agent i reports at `t` when its beat (the simulator's phase) falls there.
bool Beat(const sim::Heartbeats& h, int i, int64_t t) {
  return TimeFromMs(t) == h.LastBeat(Id(i), TimeFromMs(t));
}

using Losses = std::vector<std::pair<std::string, int64_t>>;  // machine, tick it was lost at

Losses ThroughThePlane() {
  const sim::Heartbeats beats(SimOptions());  // for the agents' phases only
  plane::PlaneOptions o;
  o.db_path = bulwark::testing::MakeTempDir() + "/c.db";
  o.heartbeat_timeout = Rule().heartbeat_timeout;
  o.closed_peer_timeout = Rule().closed_peer_timeout;
  o.reconnect_grace = Rule().reconnect_grace;
  o.tick_period = std::chrono::milliseconds(100000);  // the test's ticks are never a stall
  auto p = plane::Plane::Open(std::move(o), TimeFromMs(kStart));
  EXPECT_TRUE(p.ok());
  plane::Plane& plane = **p;
  for (int i = 1; i <= kMachines; ++i) {
    wire::RegisterRequest r = bulwark::testing::Reg(Id(i));
    r.set_shard_addr(HostOf(i) + ":7000");
    r.set_domain(DomainOf(i));
    EXPECT_TRUE(plane.Register(r, TimeFromMs(kStart)).ok());
    EXPECT_TRUE(plane.Report(bulwark::testing::Report(Id(i), {}), TimeFromMs(kStart)).ok());
  }
  plane::JobLaunch l = bulwark::testing::Launch();
  l.spec.world_size = kMachines - 1;
  EXPECT_TRUE(plane.Submit(l, TimeFromMs(kStart)).ok());
  Losses lost;
  std::set<std::string> evicted;
  for (int64_t t = kStart + 1; t <= kEnd; ++t) {
    const Time now = TimeFromMs(t);
    for (int i = 1; i <= kMachines; ++i) {
      if (Silent(i, t) || !Beat(beats, i, t)) continue;
      wire::ReportRequest r = bulwark::testing::Report(Id(i), {});
      if (NamesClosed(i, t)) r.add_peers_closed(HostOf(2) + ":41000");
      // As the service does: arrived, processed, answered.
      plane.Arrived(Id(i), 7, now);
      EXPECT_TRUE(plane.Report(r, now).ok());
      plane.Answered(Id(i), 7, now);
    }
    if (t % kTick != 0) continue;
    plane.Tick(now);
    // The status held in a local: a range-for over a member of the
    // temporary StatusJson returns would read it after its destruction.
    const auto status = plane.StatusJson(now);
    for (const auto& m : status["machines"]) {
      if (m["state"] == "evicted" && evicted.insert(m["id"].get<std::string>()).second) {
        lost.push_back({m["id"].get<std::string>(), t});
      }
    }
  }
  return lost;
}

Losses ThroughTheSimulator(size_t* mass_silences) {
  sim::Heartbeats beats(SimOptions());
  // The policy's view: every machine a standby or placed (watched); the
  // plane's policy evicts those lost, which the detector skips as lost.
  ClusterState state;
  for (int i = 1; i <= kMachines; ++i) {
    EXPECT_TRUE(AddMachine(state, Id(i), TimeFromMs(0)).ok());
    EXPECT_TRUE(SetMachineState(state, Id(i), MachineState::kStandby, TimeFromMs(0), "test").ok());
    beats.Up(Id(i), DomainOf(i), TimeFromMs(kStart));
  }
  Losses lost;
  *mass_silences = 0;
  std::vector<bool> down(kMachines + 1, false);
  for (int64_t t = kStart + 1; t <= kEnd; ++t) {
    const Time now = TimeFromMs(t);
    for (int i = 1; i <= kMachines; ++i) {
      if (Silent(i, t) && !down[i]) {
        beats.Down(Id(i), TimeFromMs(t - 1));  // heard last at its last beat before t
        down[i] = true;
      }
      if (Silent(i, t) || !Beat(beats, i, t)) continue;
      if (down[i]) {
        beats.Up(Id(i), DomainOf(i), now);  // its first report back
        down[i] = false;
      }
      if (NamesClosed(i, t)) beats.PeerClosed(Id(2), now);
    }
    if (t % kTick != 0) continue;
    const LivenessDetector::Verdict v = beats.Check(now, state);
    if (v.mass_silent > 0) ++*mass_silences;
    for (const auto& l : v.alone) lost.push_back({l.machine, t});
    for (const auto& l : v.with_domain) lost.push_back({l.machine, t});
  }
  return lost;
}

std::string Show(const Losses& l) {
  std::string s;
  for (const auto& [m, t] : l) s += m + "@" + std::to_string(t) + " ";
  return s;
}

TEST(LivenessPaths, ThePlaneAndTheSimulatorLoseTheSameMachinesAtTheSameTicks) {
  size_t mass = 0;
  // Within one tick the order is each path's own (the plane's status lists
  // machines as it keeps them): the same machines at the same ticks.
  Losses plane = ThroughThePlane();
  Losses simulated = ThroughTheSimulator(&mass);
  std::sort(plane.begin(), plane.end(), [](const auto& x, const auto& y) { return std::tie(x.second, x.first) < std::tie(y.second, y.first); });
  std::sort(simulated.begin(), simulated.end(), [](const auto& x, const auto& y) { return std::tie(x.second, x.first) < std::tie(y.second, y.first); });
  std::printf("[ losses ] plane: %s\n[ losses ] sim:   %s\n", Show(plane).c_str(), Show(simulated).c_str());
  EXPECT_EQ(plane, simulated);
  EXPECT_GT(mass, 0u) << "the trace has a mass silence";
  std::set<std::string> who;
  for (const auto& [m, t] : simulated) who.insert(m);
  EXPECT_EQ(who, (std::set<std::string>{Id(1), Id(2), Id(5), Id(6), Id(45), Id(46), Id(47), Id(48)})) << Show(simulated);
  std::set<int64_t> rack_ticks;
  for (const auto& [m, t] : simulated) {
    if (m >= Id(45)) rack_ticks.insert(t);
  }
  EXPECT_EQ(rack_ticks.size(), 1u) << "a switch's machines are lost in one tick: " << Show(simulated);
  for (const auto& [m, t] : simulated) {
    if (m == Id(2)) { EXPECT_LT(t, 6000 + 4000) << "its peer saw it close: lost before its lease"; }
    if (m == Id(5) || m == Id(6)) { EXPECT_GT(t, 12000 + 10000 - 500) << "a straggler keeps the mass silence's grace"; }
  }
}

}  // namespace
}  // namespace bulwark::controller
