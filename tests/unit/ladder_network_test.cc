// The stop-time ladder's network test, pure: the ring of links between
// neighbouring machines and the verdict that names the machine on the
// outlier links (JudgeDiagnostics with links). No processes, no sockets.
#include <gtest/gtest.h>

#include <set>

#include "controller/ladder.h"

namespace bulwark::controller {
namespace {

TEST(Network, LinksJoinNeighboursInARingAndTwoMachinesOnce) {
  const NetworkLinkMap four = NetworkLinks({"a", "b", "c", "d"});
  ASSERT_EQ(four.size(), 4u);
  EXPECT_EQ(four.at("net0"), (std::vector<MachineId>{"a", "b"}));
  EXPECT_EQ(four.at("net3"), (std::vector<MachineId>{"d", "a"})) << "the ring closes";
  EXPECT_EQ(NetworkLinks({"a", "b"}).size(), 1u) << "not the same link twice";
  EXPECT_TRUE(NetworkLinks({"a"}).empty());
  EXPECT_EQ(NetworkLinkIndex("net12"), 12);
  EXPECT_EQ(NetworkLinkIndex("h1"), -1);
  EXPECT_EQ(NetworkLinkIndex("net"), -1);
}

// Each machine's report: compute and device passed, and the link results it
// reports as its links' first machine.
std::map<MachineId, MachineDiagnostics> LinkReports(const NetworkLinkMap& links, const std::map<std::string, double>& ms,
                                                     const std::set<std::string>& failed = {}) {
  std::map<MachineId, MachineDiagnostics> r;
  for (const auto& [name, ends] : links) {
    for (const MachineId& m : ends) r[m].results = {{"compute", true, "", 100}, {"device", true, "", 1}};
  }
  for (const auto& [name, ends] : links) {
    const bool bad = failed.count(name) > 0;
    r[ends[0]].results.push_back({"network/" + name, !bad, bad ? "the link check exited with code 3" : "", ms.count(name) ? ms.at(name) : 0});
  }
  return r;
}

TEST(Network, TheMachineSharedByTwoSlowLinksFailsAndItsNeighboursDoNot) {
  const std::vector<MachineId> ms = {"m01", "m02", "m03", "m04"};
  const NetworkLinkMap links = NetworkLinks(ms);
  // m03 is on net1 (m02-m03) and net2 (m03-m04): both 10x slower.
  const auto r = LinkReports(links, {{"net0", 40}, {"net1", 400}, {"net2", 420}, {"net3", 45}});
  const DiagnosticsVerdict v = JudgeDiagnostics(ms, r, LadderConfig{}, "", links);
  ASSERT_EQ(v.failed.size(), 1u) << v.why;
  EXPECT_NE(v.failed.at("m03").find("network link net1 (m02-m03) took 400 ms, 8.9x the reference link's 45 ms"),
            std::string::npos)
      << v.failed.at("m03");
  EXPECT_FALSE(v.inconclusive);
  // Within net_slow_ratio of the reference: nobody.
  const auto ok = LinkReports(links, {{"net0", 40}, {"net1", 100}, {"net2", 110}, {"net3", 45}});
  EXPECT_TRUE(JudgeDiagnostics(ms, ok, LadderConfig{}, "", links).failed.empty());
  // The same reports judged without the links: the network results are not
  // "failed tests" of the machine that reported them.
  EXPECT_TRUE(JudgeDiagnostics(ms, r, LadderConfig{}, "").failed.empty());
}

TEST(Network, OneBadCableFailsBothEndsAndAFailedLinkCountsAsSlow) {
  const std::vector<MachineId> ms = {"m01", "m02", "m03", "m04", "m05", "m06"};
  const NetworkLinkMap links = NetworkLinks(ms);
  std::map<std::string, double> t;
  for (const auto& [name, ends] : links) t[name] = 50;
  t["net4"] = 500;  // m05-m06 only
  DiagnosticsVerdict v = JudgeDiagnostics(ms, LinkReports(links, t), LadderConfig{}, "", links);
  EXPECT_EQ(v.failed.size(), 2u) << v.why;
  EXPECT_TRUE(v.failed.count("m05") && v.failed.count("m06")) << v.why;
  // m02's links both fail outright (its NIC is down): m02 alone.
  t["net4"] = 50;
  v = JudgeDiagnostics(ms, LinkReports(links, t, {"net0", "net1"}), LadderConfig{}, "", links);
  ASSERT_EQ(v.failed.size(), 1u) << v.why;
  EXPECT_NE(v.failed.at("m02").find("failed: the link check exited"), std::string::npos) << v.failed.at("m02");
  // A machine that never answered is failed for that, and its links do not
  // drag its neighbours along.
  auto r = LinkReports(links, t, {"net0", "net1"});
  r.erase("m02");
  v = JudgeDiagnostics(ms, r, LadderConfig{}, " within 1 min", links);
  ASSERT_EQ(v.failed.size(), 1u) << v.why;
  EXPECT_EQ(v.failed.at("m02"), "no answer within 1 min");
}

}  // namespace
}  // namespace bulwark::controller
