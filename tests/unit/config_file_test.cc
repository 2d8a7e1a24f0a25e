// YAML or JSON files (cli/config_file.h), and `bulwark up --policy`'s check
// of its file before anything starts.
#include <gtest/gtest.h>

#include <fstream>

#include "cli/config_file.h"
#include "support/process.h"

namespace bulwark {
namespace {

std::string Write(const std::string& name, const std::string& text) {
  static const std::string dir = testing::MakeTempDir();
  std::ofstream(dir + "/" + name) << text;
  return dir + "/" + name;
}

TEST(ConfigFile, AYamlFileAndItsJsonTwinGiveTheSameValue) {
  Result<nlohmann::json> y = cli::ReadConfigFile(Write("p.yaml", "slow_round: 4\ncheckup_evicted: false\n"), "--x");
  Result<nlohmann::json> j =
      cli::ReadConfigFile(Write("p.json", R"({"slow_round": 4, "checkup_evicted": false})"), "--x");
  ASSERT_TRUE(y.ok() && j.ok()) << y.status().ToString() << j.status().ToString();
  EXPECT_EQ(*y, *j);
}

TEST(ConfigFile, APolicyFileIsCheckedAsTheControllerWillApplyIt) {
  Result<nlohmann::json> ok = cli::ReadPolicyFile(Write("good.yaml", "slow_round: 4\nslow_rounds: 3\n"));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ((*ok)["slow_rounds"], 3);
  const std::string bad = Write("bad.yaml", "slow_rund: 4\n");
  Result<nlohmann::json> r = cli::ReadPolicyFile(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "--policy " + bad + ": unknown field 'slow_rund'; did you mean 'slow_round'? (the fields: "
            "docs/control-plane.md, \"The policy a cluster runs with\")");
  r = cli::ReadPolicyFile(Write("broken.yaml", "slow_round: [4\n"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--policy "), std::string::npos) << r.status().message();
  EXPECT_EQ(r.status().message().find('\n'), std::string::npos) << "one line: " << r.status().message();
  r = cli::ReadPolicyFile("/nonexistent/policy.yaml");
  EXPECT_NE(r.status().message().find("cannot read it"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace bulwark
