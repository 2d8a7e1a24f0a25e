// The names `bulwark up --netns` makes (cluster/local/netns.cc) against a
// fake `ip` that keeps the kernel's table of names: a name left over from
// an earlier cluster with the same index K (one that died without `down`,
// or whose namespaces the kernel was still tearing down when its bridge,
// and with it K, was freed) is replaced, not an error; and `down` deletes
// the host ends of the pairs by name before the namespaces, and the bridge
// that holds K last. No root, no namespaces.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cluster/local/netns.h"
#include "support/process.h"

namespace bulwark::cluster {
namespace {

class FakeIp : public CommandRunner {
 public:
  std::set<std::string> links, namespaces;
  std::map<std::string, std::string> peer_of;
  std::vector<std::string> calls;

  CommandResult Run(const std::vector<std::string>& a, double) override {
    std::string line;
    for (const auto& w : a) line += (line.empty() ? "" : " ") + w;
    calls.push_back(line);
    CommandResult r;
    r.exit_code = 0;
    auto fail = [&](const std::string& err) {
      r.exit_code = 2;
      r.err = err;
      return r;
    };
    if (a.size() >= 4 && a[1] == "link" && a[2] == "add") {
      std::vector<std::string> names{a[3]};
      if (a.size() >= 9 && a[5] == "veth") names.push_back(a[8]);
      for (const auto& n : names)
        if (links.count(n)) return fail("RTNETLINK answers: File exists");
      links.insert(names.begin(), names.end());
      if (names.size() == 2) peer_of[names[0]] = names[1], peer_of[names[1]] = names[0];
    } else if (a.size() >= 4 && a[1] == "link" && a[2] == "del") {
      if (!links.erase(a[3])) return fail("Cannot find device \"" + a[3] + "\"");
      if (peer_of.count(a[3])) links.erase(peer_of[a[3]]);
    } else if (a.size() >= 6 && a[1] == "link" && a[2] == "set" && a[4] == "netns") {
      links.erase(a[3]);  // moved into the namespace, out of this table
    } else if (a.size() >= 4 && a[1] == "netns" && a[2] == "add") {
      if (!namespaces.insert(a[3]).second) return fail("Cannot create namespace file \"/run/netns/" + a[3] + "\": File exists");
    } else if (a.size() >= 4 && a[1] == "netns" && a[2] == "del") {
      if (!namespaces.erase(a[3])) return fail("Cannot remove namespace file: No such file or directory");
    }
    return r;
  }
  size_t Index(const std::string& call) const {
    return static_cast<size_t>(std::find(calls.begin(), calls.end(), call) - calls.begin());
  }
};

TEST(NetnsNames, LeftoversOfAnEarlierClusterWithTheSameIndexAreReplaced) {
  FakeIp ip;
  // Whatever K this directory hashes to, its names are taken.
  for (int k = 1; k <= 250; ++k) {
    const std::string K = std::to_string(k);
    ip.links.insert({"bw" + K + "h1", "bw" + K + "h1n", "bw" + K + "u0", "bw" + K + "u0r", "bwb" + K + "r0"});
    ip.peer_of["bw" + K + "h1"] = "bw" + K + "h1n";
    ip.peer_of["bw" + K + "u0"] = "bw" + K + "u0r";
    ip.namespaces.insert("bw" + K + "-m01");
  }
  Layout layout;
  layout.dir = testing::MakeTempDir();
  Result<NetnsPlan> plan = CreateNetns(ip, layout, {"m01", "m02"}, {0, 0});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const std::string K = std::to_string(plan->index);
  EXPECT_LT(ip.Index("ip link del bw" + K + "h1"), ip.calls.size()) << "the stale pair was deleted";
  EXPECT_LT(ip.Index("ip netns del bw" + K + "-m01"), ip.calls.size());
  EXPECT_TRUE(ip.namespaces.count("bw" + K + "-m01") && ip.namespaces.count("bw" + K + "-m02"));
  EXPECT_TRUE(ip.links.count("bw" + K + "h1") && ip.links.count("bw" + K + "h2"));

  ip.calls.clear();
  ASSERT_TRUE(DestroyNetns(ip, layout, *plan).ok());
  const size_t veth = ip.Index("ip link del bw" + K + "h1"), ns = ip.Index("ip netns del bw" + K + "-m01"),
               bridge = ip.Index("ip link del bwb" + K);
  EXPECT_LT(veth, ns) << "the pair by name, before its namespace";
  EXPECT_LT(veth, bridge);
  EXPECT_LT(ns, bridge);
  EXPECT_EQ(ip.calls.back(), "ip link del bwb" + K) << "the bridge, which holds K, goes last";
  for (const std::string& n : ip.links) EXPECT_NE(n.rfind("bw" + K + "h", 0), 0u) << n << " left behind";
  EXPECT_FALSE(ip.namespaces.count("bw" + K + "-m01"));
}

TEST(NetnsNames, AnotherFailureOfANameIsStillAnError) {
  class Refusing : public FakeIp {
   public:
    CommandResult Run(const std::vector<std::string>& a, double t) override {
      if (a.size() >= 4 && a[1] == "netns" && a[2] == "add") {
        CommandResult r;
        r.exit_code = 1;
        r.err = "mount --make-shared /run/netns failed: Operation not permitted";
        return r;
      }
      return FakeIp::Run(a, t);
    }
  } ip;
  Layout layout;
  layout.dir = testing::MakeTempDir();
  Result<NetnsPlan> plan = CreateNetns(ip, layout, {"m01"}, {});
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("Operation not permitted"), std::string::npos) << plan.status().ToString();
}

}  // namespace
}  // namespace bulwark::cluster
