// A machine its peers cannot reach (issue 40): the address check at
// registration, an exit that names an unreachable peer, and the reach probe
// a new or returned machine passes before it is given ranks.
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
using testing::Step;

TEST(AddressCheck, LoopbackIsRefusedWhenTheControllerIsNotOnLoopback) {
  AddressRules r;
  r.controller_host = "10.1.2.3";
  const Status st = CheckAdvertisedAddress(r, "m01", "127.0.0.1:7000");
  EXPECT_EQ(st.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(st.message().find("127.0.0.1"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("--address"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find('\n'), std::string::npos) << "one line";
  EXPECT_TRUE(CheckAdvertisedAddress(r, "m01", "10.1.2.7:7000").ok());
}

TEST(AddressCheck, LoopbackServesAControllerOnLoopbackOrAnUnknownOne) {
  AddressRules r;
  r.controller_host = "127.0.0.1";
  EXPECT_TRUE(CheckAdvertisedAddress(r, "m01", "127.0.0.1:7000").ok());
  r.controller_host = "0.0.0.0";
  EXPECT_TRUE(CheckAdvertisedAddress(r, "m01", "127.0.0.1:7000").ok());
  EXPECT_TRUE(CheckAdvertisedAddress(AddressRules{}, "m01", "127.0.0.1:7000").ok());
  r.controller_host = "10.1.2.3";
  EXPECT_TRUE(CheckAdvertisedAddress(r, "m01", "").ok()) << "an agent without a shard server advertises nothing";
}

TEST(AddressCheck, ANamespacedMachineMustAdvertiseItsAddressInItsNamespace) {
  AddressRules r;
  r.controller_host = "10.213.7.1";
  r.namespaces["m01"] = {"bw7-m01", "10.213.7.2"};
  r.subnet_prefix = "10.213.7.";
  EXPECT_TRUE(CheckAdvertisedAddress(r, "m01", "10.213.7.2:41000").ok());
  // Restarted by hand on the host's network: loopback, or the host's own
  // end of the bridge (the interface towards the controller).
  for (const char* wrong : {"127.0.0.1:41000", "10.213.7.1:41000"}) {
    const Status st = CheckAdvertisedAddress(r, "m01", wrong);
    EXPECT_EQ(st.code(), Status::Code::kFailedPrecondition) << wrong;
    EXPECT_NE(st.message().find("ip netns exec bw7-m01"), std::string::npos) << st.message();
  }
  // A machine the plan does not name must at least be on the bridge.
  EXPECT_TRUE(CheckAdvertisedAddress(r, "m09", "10.213.7.40:1").ok());
  const Status off = CheckAdvertisedAddress(r, "m09", "192.168.1.5:1");
  EXPECT_EQ(off.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(off.message().find("bridge"), std::string::npos) << off.message();
}

wire::RegisterRequest RegAt(const std::string& m, const std::string& addr) {
  wire::RegisterRequest r = Reg(m);
  r.set_shard_addr(addr);
  return r;
}

TEST(Plane, RegistrationOfAnUnreachableAddressIsRefusedAndRecordsNothing) {
  PlaneOptions o;
  o.db_path = testing::MakeTempDir() + "/c.db";
  o.addresses.controller_host = "10.0.0.100";
  auto p = Plane::Open(o, TimeFromMs(1000));
  ASSERT_TRUE(p.ok());
  const Status st = (*p)->Register(RegAt("m01", "127.0.0.1:7000"), TimeFromMs(1000));
  EXPECT_EQ(st.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(st.message().find("loopback"), std::string::npos) << st.message();
  EXPECT_TRUE((*p)->StatusJson(TimeFromMs(1000))["machines"].empty());
  EXPECT_TRUE((*p)->Register(RegAt("m01", "10.0.0.1:7000"), TimeFromMs(1000)).ok());
}

wire::AgentEvent PeerLostExit(int64_t seq, const std::string& unreachable, int64_t gen, int64_t at_ms) {
  wire::AgentEvent e;
  e.set_kind(wire::AgentEvent::RANK_EXITED);
  e.set_seq(seq);
  e.set_exit_code(3);
  e.set_signature("connection_reset");
  e.set_unreachable_peer(unreachable);
  e.set_generation(gen);
  e.set_observed_ms(at_ms);
  return e;
}

// The plane resolves the address a rank could not reach to the machine that
// advertised it; the policy evicts that machine and the job goes on.
TEST(Plane, AnExitNamingAPeersAddressEvictsThatPeer) {
  PlaneOptions o;
  o.db_path = testing::MakeTempDir() + "/c.db";
  auto p = Plane::Open(o, TimeFromMs(1000));
  ASSERT_TRUE(p.ok());
  const std::map<std::string, std::string> at = {
      {"m01", "10.0.0.1:7000"}, {"m02", "10.0.0.2:7000"}, {"m03", "10.0.0.3:7000"}, {"s01", "10.0.0.9:7000"}};
  for (const auto& [m, addr] : at) ASSERT_TRUE((*p)->Register(RegAt(m, addr), TimeFromMs(1000)).ok());
  JobLaunch l = Launch();
  l.spec.world_size = 3;
  ASSERT_TRUE((*p)->Submit(l, TimeFromMs(1000)).ok());
  for (const auto& [m, addr] : at) ASSERT_TRUE((*p)->Report(Report(m, {}), TimeFromMs(2000)).ok());
  const int64_t gen = (*p)->StatusJson(TimeFromMs(2000))["job"]["generation"].get<int64_t>();
  // A ring port, not the shard server's: the host is what names the machine.
  ASSERT_TRUE((*p)->Report(Report("m03", {PeerLostExit(1, "10.0.0.2:58237", gen, 3000)}), TimeFromMs(3000)).ok());
  const auto s = (*p)->StatusJson(TimeFromMs(3000));
  EXPECT_EQ(s["job"]["placement"].dump(), R"(["m01","s01","m03"])");
  EXPECT_NE(s["job"]["state"], "stopped");
}

TEST(Plane, AnAddressSeveralMachinesShareBlamesNoOne) {
  PlaneOptions o;
  o.db_path = testing::MakeTempDir() + "/c.db";
  auto p = Plane::Open(o, TimeFromMs(1000));
  ASSERT_TRUE(p.ok());
  for (const char* m : {"m01", "m02", "m03", "s01"}) {
    ASSERT_TRUE((*p)->Register(RegAt(m, std::string("127.0.0.1:70") + m[2]), TimeFromMs(1000)).ok());
  }
  JobLaunch l = Launch();
  l.spec.world_size = 3;
  ASSERT_TRUE((*p)->Submit(l, TimeFromMs(1000)).ok());
  for (const char* m : {"m01", "m02", "m03", "s01"}) ASSERT_TRUE((*p)->Report(Report(m, {}), TimeFromMs(2000)).ok());
  const int64_t gen = (*p)->StatusJson(TimeFromMs(2000))["job"]["generation"].get<int64_t>();
  ASSERT_TRUE((*p)->Report(Report("m03", {PeerLostExit(1, "127.0.0.1:58237", gen, 3000)}), TimeFromMs(3000)).ok());
  EXPECT_EQ((*p)->StatusJson(TimeFromMs(3000))["job"]["placement"].dump(), R"(["m01","m02","m03"])");
}

// A machine proves it can be reached before it joins (issue 40): with
// probing on, a machine that comes after the job's start joins only once
// reached; one not reached while its agent reports is evicted with the
// reason, never a standby; a silent agent's failed probe is left to its
// heartbeat; a standby is reached again every reprobe_standby_every.
TEST(Plane, AMachineJoinsOnlyOnceReachedAndOneNotReachedIsNeverAStandby) {
  PlaneOptions o;
  o.db_path = testing::MakeTempDir() + "/c.db";
  o.probe_reachability = true;
  auto p = Plane::Open(o, TimeFromMs(1000));
  ASSERT_TRUE(p.ok());
  const std::map<std::string, std::string> at = {
      {"m01", "10.0.0.1:7000"}, {"m02", "10.0.0.2:7000"}, {"m03", "10.0.0.3:7000"}, {"m04", "10.0.0.4:7000"}};
  for (const char* m : {"m01", "m02"}) ASSERT_TRUE((*p)->Register(RegAt(m, at.at(m)), TimeFromMs(1000)).ok());
  JobLaunch l = Launch();
  l.spec.world_size = 2;
  ASSERT_TRUE((*p)->Submit(l, TimeFromMs(1000)).ok());
  for (const char* m : {"m03", "m04"}) ASSERT_TRUE((*p)->Register(RegAt(m, at.at(m)), TimeFromMs(1200)).ok());
  for (const auto& [m, addr] : at) ASSERT_TRUE((*p)->Report(Report(m, {}), TimeFromMs(1500)).ok());
  auto state = [&](const std::string& m, int64_t ms) {
    const auto status = (*p)->StatusJson(TimeFromMs(ms));
    for (const auto& x : status["machines"]) {
      if (x["id"] == m) return x.value("state", std::string()) + "|" + x.value("reason", std::string());
    }
    return std::string("?");
  };
  // Reported, not yet reached: not standbys.
  EXPECT_EQ(state("m03", 1500).find("standby"), std::string::npos) << state("m03", 1500);
  auto due = (*p)->ProbesDue(TimeFromMs(1600));
  ASSERT_EQ(due.size(), 2u);
  EXPECT_TRUE((*p)->ProbesDue(TimeFromMs(1600)).empty()) << "in flight: not handed out twice";
  for (const auto& probe : due) {
    EXPECT_EQ(probe.addr, at.at(probe.machine));
    if (probe.machine == "m04") {
      // Still reporting while the probe waited: unreachable.
      ASSERT_TRUE((*p)->Report(Report("m04", {}), TimeFromMs(1800)).ok());
      (*p)->ProbeDone(probe, Status::Unavailable("connecting to shard server 10.0.0.4:7000: timed out"),
                      TimeFromMs(2000));
    } else {
      (*p)->ProbeDone(probe, Status::OK(), TimeFromMs(2000));
    }
  }
  const std::string m04 = state("m04", 2000);
  EXPECT_EQ(m04.rfind("evicted|", 0), 0u) << m04;
  EXPECT_NE(m04.find("cannot reach m04 at 10.0.0.4:7000"), std::string::npos) << m04;
  EXPECT_EQ(state("m03", 2000).rfind("standby", 0), 0u) << state("m03", 2000);
  const auto s = (*p)->StatusJson(TimeFromMs(2000));
  EXPECT_EQ(s["job"]["placement"].dump(), R"(["m01","m02"])") << s.dump();

  // Returned, m04 proves itself again; its agent silent this time: the
  // failed probe is not held against it, and it is probed again.
  ASSERT_TRUE((*p)->ReturnMachine("m04", TimeFromMs(3000)).ok());
  ASSERT_TRUE((*p)->Report(Report("m04", {}), TimeFromMs(3000)).ok());
  due = (*p)->ProbesDue(TimeFromMs(3100));
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].machine, "m04");
  (*p)->ProbeDone(due[0], Status::Unavailable("connection refused"), TimeFromMs(3200));
  EXPECT_EQ(state("m04", 3200).rfind("joining", 0), 0u) << state("m04", 3200);
  ASSERT_TRUE((*p)->Report(Report("m04", {}), TimeFromMs(3300)).ok());
  due = (*p)->ProbesDue(TimeFromMs(3400));
  ASSERT_EQ(due.size(), 1u);
  (*p)->ProbeDone(due[0], Status::OK(), TimeFromMs(3500));
  EXPECT_EQ(state("m04", 3500).rfind("standby", 0), 0u) << state("m04", 3500);
  // Standbys are reached again once reprobe_standby_every has passed.
  EXPECT_TRUE((*p)->ProbesDue(TimeFromMs(4000)).empty());
  for (const char* m : {"m03", "m04"}) ASSERT_TRUE((*p)->Report(Report(m, {}), TimeFromMs(8600)).ok());
  due = (*p)->ProbesDue(TimeFromMs(8600));
  ASSERT_EQ(due.size(), 2u);
}

}  // namespace
}  // namespace bulwark::plane
