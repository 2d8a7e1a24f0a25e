// Failure domains from Slurm's topology (issue 38, slurm_topology.h): the
// leaf switch of each node from topology.conf (the Slurm documentation's
// example) and from `scontrol show topology` (Slurm 22.05's output), and
// `bulwark up --backend slurm` giving each agent its switch as --domain.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include "cluster/slurm/slurm_text.h"
#include "cluster/slurm/slurm_topology.h"
#include "cluster/slurm/slurm_up.h"

namespace bulwark::cluster {
namespace {

using Strings = std::vector<std::string>;

// topology.conf as the Slurm documentation gives it (topology.conf(5)).
constexpr const char* kTopologyConf = R"(# topology.conf
# Switch Configuration
SwitchName=s0 Nodes=dev[0-5]
SwitchName=s1 Nodes=dev[6-11]
SwitchName=s2 Nodes=dev[12-17]
SwitchName=s3 Switches=s[0-2]
)";

// `scontrol show topology` for a two-level tree: the top switch lists every node too.
constexpr const char* kScontrolTopology =
    "SwitchName=s0 Level=0 LinkSpeed=1 Nodes=n[01-02]\n"
    "SwitchName=s1 Level=0 LinkSpeed=1 Nodes=n[03-04],gpu7\n"
    "SwitchName=top Level=1 LinkSpeed=1 Nodes=n[01-04],gpu7 Switches=s[0-1]\n";

TEST(SlurmTopology, ExpandsHostlistsKeepingZeroPadding) {
  EXPECT_EQ(*ExpandHostlist("tux[0-2,7],gpu[08-10],login"),
            (Strings{"tux0", "tux1", "tux2", "tux7", "gpu08", "gpu09", "gpu10", "login"}));
  EXPECT_EQ(*ExpandHostlist("n1"), Strings{"n1"});
  EXPECT_FALSE(ExpandHostlist("n[1-").ok());
  EXPECT_FALSE(ExpandHostlist("n[3-1]").ok());
}

TEST(SlurmTopology, TopologyConfsLeafSwitchesAreTheDomains) {
  Result<std::map<std::string, std::string>> leaf = LeafSwitches(kTopologyConf);
  ASSERT_TRUE(leaf.ok()) << leaf.status().ToString();
  EXPECT_EQ(leaf->size(), 18u);
  EXPECT_EQ(leaf->at("dev0"), "s0");
  EXPECT_EQ(leaf->at("dev11"), "s1");
  EXPECT_EQ(leaf->at("dev17"), "s2");
}

TEST(SlurmTopology, ScontrolsUpperLevelsAreNoDomainsAndAFlatClusterHasNone) {
  Result<std::map<std::string, std::string>> leaf = LeafSwitches(kScontrolTopology);
  ASSERT_TRUE(leaf.ok());
  EXPECT_EQ(*leaf, (std::map<std::string, std::string>{
                       {"n01", "s0"}, {"n02", "s0"}, {"n03", "s1"}, {"n04", "s1"}, {"gpu7", "s1"}}));
  EXPECT_TRUE(LeafSwitches("").value().empty());
  EXPECT_FALSE(LeafSwitches("SwitchName=s0 Nodes=n[1-\n").ok());
}

// Answers hostnames for the allocation and, when given, the topology.
struct TopologyRunner : CommandRunner {
  std::string topology;
  CommandResult Run(const std::vector<std::string>& argv, double) override {
    CommandResult r;
    if (argv.size() == 4 && argv[2] == "hostnames") {
      r.exit_code = 0;
      r.out = "n01\nn02\nn03\nn04\n";
    } else if (argv.size() == 3 && argv[2] == "topology") {
      r.exit_code = topology.empty() ? 1 : 0;
      r.err = topology.empty() ? "scontrol: error: No topology information available" : "";
      r.out = topology;
    }
    return r;
  }
};

TEST(SlurmTopology, UpGivesEachAgentItsLeafSwitchAndAFlatClusterNone) {
  ::setenv("SLURM_JOB_ID", "7", 1);
  ::setenv("SLURM_JOB_NODELIST", "n[01-04]", 1);
  TopologyRunner run;
  run.topology = kScontrolTopology;
  Result<SlurmRecord> r = PlanSlurmUp(run, {3, 1, 0, "/b/bulwark", "/shared/d"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->domains, (std::map<std::string, std::string>{{"n01", "s0"}, {"n02", "s0"}, {"n03", "s1"}, {"n04", "s1"}}));
  const Strings step = AgentStepArgv(*r, "n03");
  EXPECT_EQ(Strings(step.end() - 2, step.end()), (Strings{"--domain", "s1"}));
  EXPECT_NE(AgentJobArgv(*r, "/l", "n04").back().find("--domain 's1'"), std::string::npos);
  EXPECT_EQ(AgentJobArgv(*r, "/l", "").back().find("--domain"), std::string::npos) << "a node Slurm picks later";
  // The record keeps them for the controller's later starts.
  Result<SlurmRecord> back = DecodeSlurmRecord(EncodeSlurmRecord(*r));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->domains, r->domains);

  run.topology.clear();  // topology/flat: scontrol has none to show
  r = PlanSlurmUp(run, {3, 1, 0, "/b/bulwark", "/shared/d"});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->domains.empty());
  const Strings flat = AgentStepArgv(*r, "n03");
  EXPECT_EQ(std::find(flat.begin(), flat.end(), "--domain"), flat.end());
  ::unsetenv("SLURM_JOB_ID");
  ::unsetenv("SLURM_JOB_NODELIST");
}

}  // namespace
}  // namespace bulwark::cluster
