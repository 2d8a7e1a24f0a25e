// The core's liveness rule (controller/liveness_detector.h), one rule a
// test: which silent machines are lost, and when.
#include "controller/liveness_detector.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace bulwark::controller {
namespace {

Time At(int64_t ms) { return TimeFromMs(ms); }

std::string Id(int i) {
  char id[16];
  std::snprintf(id, sizeof id, "m%03d", i);
  return id;
}

// Machines m001..m00N known to the policy as standbys.
ClusterState StateOf(int n) {
  ClusterState s;
  for (int i = 1; i <= n; ++i) {
    EXPECT_TRUE(AddMachine(s, Id(i), At(0)).ok());
    EXPECT_TRUE(SetMachineState(s, Id(i), MachineState::kStandby, At(0), "test").ok());
  }
  return s;
}

// A detector of n machines, each heard at `at` (held to the lease).
LivenessDetector DetectorOf(int n, Time at, LivenessOptions o = {}) {
  LivenessDetector d(o);
  for (int i = 1; i <= n; ++i) {
    d.Add(Id(i));
    d.Back(Id(i), at);
  }
  return d;
}

std::vector<std::string> Alone(const LivenessDetector::Verdict& v) {
  std::vector<std::string> out;
  for (const auto& l : v.alone) out.push_back(l.machine);
  return out;
}

// Every machine heard within its lease: nothing to decide.
TEST(LivenessDetector, EveryMachineHeardMeansNoLoss) {
  ClusterState s = StateOf(5);
  LivenessDetector d = DetectorOf(5, At(1000));
  for (int64_t t = 1500; t <= 20000; t += 500) {
    for (int i = 1; i <= 5; ++i) d.Heard(Id(i), At(t), At(t));
    const auto v = d.Check(At(t), s, {});
    EXPECT_TRUE(v.alone.empty() && v.with_domain.empty()) << t;
  }
}

// Silent past heartbeat_timeout (strictly): lost, with the time it was last
// heard; once lost, it is not decided again, and a report brings it back.
TEST(LivenessDetector, AMachineSilentPastItsLeaseIsLost) {
  ClusterState s = StateOf(2);
  LivenessDetector d = DetectorOf(2, At(1000));
  d.Heard(Id(2), At(3000), At(3000));
  EXPECT_TRUE(d.Check(At(3000), s, {}).alone.empty()) << "silent exactly the lease: not past it";
  const auto v = d.Check(At(3001), s, {});
  ASSERT_EQ(Alone(v), std::vector<std::string>{Id(1)});
  EXPECT_EQ(v.alone[0].last_heard, At(1000));
  EXPECT_EQ(v.alone[0].timeout, std::chrono::milliseconds(2000));
  EXPECT_FALSE(v.alone[0].closed);
  d.Lose(Id(1));
  EXPECT_TRUE(d.Lost(Id(1)));
  EXPECT_TRUE(d.Check(At(3250), s, {}).alone.empty());
  d.Heard(Id(1), At(3300), At(3300));
  EXPECT_TRUE(d.Lost(Id(1))) << "a lost machine is heard again only by its registration or report (Back)";
  EXPECT_TRUE(d.Back(Id(1), At(3400)));
  EXPECT_FALSE(d.Lost(Id(1)));
}

// Twice the gaps' 99th percentile (the top of the 1.5 s bucket: 1.6 s), at
// least heartbeat_timeout, at most reconnect_grace.
TEST(LivenessDetector, TheLeaseIsLearnedFromTheGapsBetweenReports) {
  LivenessDetector d = DetectorOf(40, At(0));
  EXPECT_EQ(d.Lease(At(0)), std::chrono::milliseconds(2000)) << "nothing learned yet: heartbeat_timeout";
  for (int64_t t = 1500; t <= 6000; t += 1500) {
    for (int i = 1; i <= 40; ++i) d.Heard(Id(i), At(t), At(t));
  }
  EXPECT_EQ(d.GapP99(At(6000)), std::chrono::milliseconds(1600));
  EXPECT_EQ(d.Lease(At(6000)), std::chrono::milliseconds(3200));
  d.AddGaps(At(6000), std::chrono::milliseconds(9000), 1000);
  EXPECT_EQ(d.Lease(At(6000)), std::chrono::milliseconds(10000)) << "capped at reconnect_grace";
  EXPECT_EQ(d.Lease(At(12000)), std::chrono::milliseconds(2000)) << "the gaps are forgotten after 5 s";
}

// A machine not heard since the controller started (or handed over) is held
// to the reconnect grace, and so is every machine while agents re-attach.
TEST(LivenessDetector, AMachineNotYetHeardGetsTheReconnectGrace) {
  ClusterState s = StateOf(3);
  LivenessDetector d = DetectorOf(3, At(1000));
  d.AwaitBack(Id(1));
  EXPECT_EQ(Alone(d.Check(At(5000), s, {})), (std::vector<std::string>{Id(2), Id(3)})) << "past the lease";
  d.Lose(Id(2));
  d.Lose(Id(3));
  EXPECT_TRUE(d.Check(At(11000), s, {}).alone.empty()) << "m001 within the grace";
  EXPECT_EQ(Alone(d.Check(At(11001), s, {})), std::vector<std::string>{Id(1)});

  LivenessDetector r = DetectorOf(3, At(1000));
  LivenessDetector::CheckInput reattaching;
  reattaching.reattaching = true;
  EXPECT_TRUE(r.Check(At(5000), s, reattaching).alone.empty());
  EXPECT_EQ(r.HoldForReattach(At(4000), s), 0u) << "all three are back";
}

// Within its lease a machine whose peer, heard after it went quiet, saw its
// connections close is lost after closed_peer_timeout: down, not cut off.
TEST(LivenessDetector, AClosedPeerIsLostBeforeItsLease) {
  ClusterState s = StateOf(3);
  LivenessOptions o;
  o.heartbeat_timeout = std::chrono::milliseconds(6000);
  LivenessDetector d = DetectorOf(3, At(1000), o);
  LivenessDetector::CheckInput in;
  in.closed_seen = [](const MachineId& m) -> std::optional<Time> {
    if (m == "m001") return At(1500);  // after it last spoke
    if (m == "m002") return At(900);   // before: says nothing of its silence since
    return std::nullopt;
  };
  EXPECT_TRUE(d.Check(At(3000), s, in).alone.empty()) << "within closed_peer_timeout";
  const auto v = d.Check(At(3001), s, in);
  ASSERT_EQ(Alone(v), std::vector<std::string>{Id(1)});
  EXPECT_TRUE(v.alone[0].closed);
  d.Lose(Id(1));
  EXPECT_TRUE(d.Check(At(7000), s, in).alone.empty());
  EXPECT_EQ(Alone(d.Check(At(7001), s, in)), (std::vector<std::string>{Id(2), Id(3)}));
}

// A switch takes its rack at once, but the last reports differ by up to a
// report period: the first machine past its lease waits for the rest of its
// domain (kDomainSkew at most), and they are decided together.
TEST(LivenessDetector, ADomainsMachinesAreLostTogether) {
  ClusterState s = StateOf(4);
  LivenessDetector d = DetectorOf(4, At(1000));
  for (int i = 1; i <= 3; ++i) d.SetDomain(Id(i), "r1");
  d.Heard(Id(2), At(1300), At(1300));
  d.Heard(Id(3), At(1450), At(1450));
  d.Heard(Id(4), At(5000), At(5000));
  for (int64_t t = 3100; t < 3450; t += 50) {
    const auto v = d.Check(At(t), s, {});
    EXPECT_TRUE(v.with_domain.empty() && v.alone.empty()) << "at " << t << ": waiting for the rest of r1";
  }
  const auto v = d.Check(At(3451), s, {});
  ASSERT_EQ(v.with_domain.size(), 3u);
  EXPECT_TRUE(v.alone.empty());
  EXPECT_EQ(v.with_domain[1].last_heard, At(1300));
  EXPECT_TRUE(d.Lost(Id(1)) && d.Lost(Id(2)) && d.Lost(Id(3))) << "a domain's losses are lost at once";

  // It waits kDomainSkew at most: a domain mate whose lease ends later is not waited for.
  LivenessDetector e = DetectorOf(2, At(1000));
  e.SetDomain(Id(1), "r1");
  e.SetDomain(Id(2), "r1");
  e.Heard(Id(2), At(2500), At(2500));
  EXPECT_TRUE(e.Check(At(4000), s, {}).with_domain.empty());
  const auto w = e.Check(At(4001), s, {});
  ASSERT_EQ(w.with_domain.size(), 1u);
  EXPECT_EQ(w.with_domain[0].machine, Id(1));
}

// More than kMassSilence past their leases at once get the reconnect grace,
// and the stragglers of a mass silence keep it while it is recent.
TEST(LivenessDetector, AMassSilenceGetsTheReconnectGrace) {
  const int n = 40, quiet = static_cast<int>(LivenessDetector::kMassSilence) + 4;
  ClusterState s = StateOf(n);
  LivenessDetector d = DetectorOf(n, At(1000));
  for (int64_t t = 1500; t <= 12000; t += 250) {
    // The quiet ones are back at 4 s, but for three stragglers.
    const int first = t < 4000 ? quiet + 1 : 4;
    for (int i = first; i <= n && t % 500 == 0; ++i) d.Back(Id(i), At(t));
    const auto v = d.Check(At(t), s, {});
    if (t == 3250) { EXPECT_EQ(v.mass_silent, static_cast<size_t>(quiet)); }
    if (t < 11000) { EXPECT_TRUE(v.alone.empty()) << t; }
    for (const auto& l : v.alone) d.Lose(l.machine);
  }
  EXPECT_TRUE(d.Lost(Id(1)) && d.Lost(Id(2)) && d.Lost(Id(3)));
  EXPECT_FALSE(d.Lost(Id(4)));
}

// At most kLostPerTick alone in one check, the longest silent first.
TEST(LivenessDetector, ACheckLosesAFewAtATimeTheLongestSilentFirst) {
  ClusterState s = StateOf(6);
  LivenessDetector d = DetectorOf(6, At(1000));
  for (int i = 1; i <= 6; ++i) d.Heard(Id(i), At(1000 + 10 * (7 - i)), At(1100));  // m006 silent longest
  auto v = d.Check(At(5000), s, {});
  ASSERT_EQ(v.alone.size(), LivenessDetector::kLostPerTick);
  EXPECT_EQ(Alone(v), (std::vector<std::string>{Id(6), Id(5), Id(4), Id(3)}));
  for (const auto& l : v.alone) d.Lose(l.machine);
  EXPECT_EQ(Alone(d.Check(At(5250), s, {})), (std::vector<std::string>{Id(2), Id(1)}));
}

// An evicted machine's silence says nothing, unless it is out for its
// checkup; one the policy does not know is not lost either.
TEST(LivenessDetector, AnEvictedMachinesSilenceSaysNothingButDuringItsCheckup) {
  ClusterState s = StateOf(2);
  ASSERT_TRUE(SetMachineState(s, Id(1), MachineState::kEvicted, At(0), "test").ok());
  ASSERT_TRUE(SetMachineState(s, Id(2), MachineState::kEvicted, At(0), "test").ok());
  SetCheckup(s, *s.FindMachine(Id(2)), 7);
  LivenessDetector d = DetectorOf(3, At(1000));
  EXPECT_EQ(Alone(d.Check(At(5000), s, {})), std::vector<std::string>{Id(2)});
  EXPECT_EQ(d.Watching(s), 1u) << "m002 until it is marked lost";
}

// The simulator's healthy machine: heard at every check until it falls
// silent; then lost at its lease like any other.
TEST(LivenessDetector, AContinuouslyHeardMachineIsLostOnlyOnceSilent) {
  ClusterState s = StateOf(2);
  LivenessDetector d(LivenessOptions{});
  d.HeardContinuously(Id(1), At(0));
  d.HeardContinuously(Id(2), At(0));
  EXPECT_EQ(d.Watching(s), 0u);
  EXPECT_TRUE(d.Check(At(100000), s, {}).alone.empty());
  EXPECT_EQ(d.LastHeard(Id(1), At(100000)), At(100000));
  d.Silent(Id(1), At(100400));
  EXPECT_EQ(d.Watching(s), 1u);
  EXPECT_TRUE(d.Check(At(102400), s, {}).alone.empty());
  EXPECT_EQ(Alone(d.Check(At(102500), s, {})), std::vector<std::string>{Id(1)});
}

// Time the controller could not hear anyone is nobody's silence.
TEST(LivenessDetector, CreditedTimeIsNobodysSilence) {
  ClusterState s = StateOf(1);
  LivenessDetector d = DetectorOf(1, At(1000));
  d.Credit(At(5000), std::chrono::milliseconds(3000));
  EXPECT_EQ(d.LastHeard(Id(1), At(5000)), At(4000));
  EXPECT_TRUE(d.Check(At(6000), s, {}).alone.empty());
  EXPECT_EQ(d.Check(At(6001), s, {}).alone.size(), 1u);
}

}  // namespace
}  // namespace bulwark::controller
