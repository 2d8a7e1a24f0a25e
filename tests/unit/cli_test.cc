// bulwark's command line (cli/commands.h): subcommands, per-command help,
// typo suggestions and one-line errors; then the binary's exit codes.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/exit_codes.h"
#include "common/files.h"
#include "support/process.h"

namespace bulwark::cli {
namespace {

TEST(Cli, CommandPositionalsAndFlagsFillArgs) {
  auto c = ParseCommandLine({"inject", "kill", "--machine", "m01", "--rank=1", "--dir", "/tmp/c"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->help.empty());
  EXPECT_EQ(c->args.positional, (std::vector<std::string>{"inject", "kill"}));
  EXPECT_EQ(c->args.Get("machine"), "m01");
  EXPECT_EQ(c->args.Get("rank"), "1");
  EXPECT_EQ(ClusterDir(c->args), "/tmp/c");
  EXPECT_FALSE(c->args.Has("factor"));

  // Flags before the positionals, booleans that take no value, a value that
  // looks like a flag, and a repeated flag (the last wins).
  auto m = ParseCommandLine({"machine", "--machine", "m02", "return"});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->args.positional, (std::vector<std::string>{"machine", "return"}));
  auto u = ParseCommandLine({"update", "--now", "job.yaml", "--why", "-x fixed", "--why", "fixed"});
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->args.positional, (std::vector<std::string>{"update", "job.yaml"}));
  EXPECT_TRUE(u->args.Has("now"));
  EXPECT_EQ(u->args.Get("now"), "");
  EXPECT_EQ(u->args.Get("why"), "fixed");
  auto r = ParseCommandLine({"rollback", "--to", "-1"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->args.Get("to"), "-1");
}

// What `up` passes the processes it starts stays a valid command line.
TEST(Cli, TheArgvUpGivesControllersAndAgentsParses) {
  for (const std::vector<std::string>& argv : std::vector<std::vector<std::string>>{
           {"controller", "--init", "--dir", "d", "--metrics-port", "0", "--ladder-rungs", "diagnose,replay",
            "--ladder-tests", "compute", "--ladder-budget", "30", "--failure-rate", "0.01", "--ladder-align-every", "5"},
           {"agent", "--machine", "m01", "--dir", "d", "--signatures", "s.tsv"},
           {"agent", "--dir", "/shared/run", "--machine", "node1"},
           {"up", "--backend", "slurm", "--machines", "2", "--standby", "1", "--grow", "1", "--listen", "h"},
           {"sim", "--gpus", "9600", "--days", "90", "--config", "sim.yaml", "--json", "--sweep", "scale"},
           {"bench-checkpoint", "--rounds", "1", "--shard-optimizer", "--data", "data/kjv", "--config", "tiny"}}) {
    auto c = ParseCommandLine(argv);
    EXPECT_TRUE(c.ok()) << argv[0] << ": " << c.status().ToString();
  }
}

TEST(Cli, HelpForTheBinaryAndForEachCommand) {
  for (const std::vector<std::string>& argv :
       std::vector<std::vector<std::string>>{{}, {"--help"}, {"help"}, {"-h"}}) {
    auto c = ParseCommandLine(argv);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_NE(c->help.find("bench-compare"), std::string::npos) << c->help;
    EXPECT_NE(c->help.find("start a cluster"), std::string::npos) << c->help;
  }
  for (const std::vector<std::string>& argv :
       std::vector<std::vector<std::string>>{{"up", "--help"}, {"help", "up"}, {"up", "--machines", "2", "-h"}}) {
    auto c = ParseCommandLine(argv);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_NE(c->help.find("--machines N"), std::string::npos) << c->help;
    EXPECT_NE(c->help.find("--ladder-rungs"), std::string::npos) << c->help;
    EXPECT_NE(c->help.find("--dir"), std::string::npos) << c->help;
    EXPECT_EQ(c->help.find("bench-compare"), std::string::npos) << "up's help, not the list:\n" << c->help;
  }
}

TEST(Cli, TyposAreOneLineErrorsNamingTheNearestName) {
  auto cmd = ParseCommandLine({"stauts"});
  ASSERT_FALSE(cmd.ok());
  EXPECT_EQ(cmd.status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(cmd.status().message(), "unknown command 'stauts'; did you mean 'status'? (run 'bulwark --help')");
  auto flag = ParseCommandLine({"up", "--machins", "2"});
  ASSERT_FALSE(flag.ok());
  EXPECT_EQ(flag.status().message(), "up: unknown flag '--machins'; did you mean '--machines'? (run 'bulwark up --help')");
  auto far = ParseCommandLine({"status", "--frobnicate"});
  ASSERT_FALSE(far.ok());
  EXPECT_EQ(far.status().message().find("did you mean"), std::string::npos) << far.status().message();
  auto extra = ParseCommandLine({"status", "now"});
  ASSERT_FALSE(extra.ok());
  EXPECT_NE(extra.status().message().find("unexpected argument 'now'"), std::string::npos);
  auto before = ParseCommandLine({"--dir", "d", "status"});
  ASSERT_FALSE(before.ok());
  EXPECT_NE(before.status().message().find("before the command"), std::string::npos) << before.status().message();
}

TEST(Cli, AMissingValueIsOneLine) {
  auto c = ParseCommandLine({"up", "--machines"});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(c.status().message(), "up: --machines needs a value (run 'bulwark up --help')");
}

// The binary: help on stdout with exit 0, errors as one stderr line with the
// usage exit code.
TEST(CliBinary, HelpExitsZeroAndErrorsAreOneLineWithTheUsageCode) {
  const std::string bulwark = testing::BinDir() + "/bulwark";
  auto help = testing::Run({bulwark, "up", "--help"}, {}, 10);
  EXPECT_EQ(help.exit_code, 0) << help.err;
  EXPECT_NE(help.out.find("--machines"), std::string::npos) << help.out;
  for (const std::vector<std::string>& argv : std::vector<std::vector<std::string>>{
           {bulwark, "stauts"}, {bulwark, "up", "--machines"}, {bulwark, "inject", "kill", "--machin", "m01"},
           {bulwark, "up", "--machines", "2", "--nics", "eth0", "--dir", testing::MakeTempDir()}}) {
    auto r = testing::Run(argv, {}, 10);
    EXPECT_EQ(r.exit_code, kExitUsage) << argv[1] << ": " << r.err;
    EXPECT_EQ(r.err.rfind("bulwark: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

// Namespaces are up's default where they can be made; asking for them
// where they cannot be had, or both ways at once, is a one-line error
// before anything starts.
TEST(CliBinary, ConflictingNetworkChoicesAreOneLineErrors) {
  const std::string bulwark = testing::BinDir() + "/bulwark", dir = testing::MakeTempDir();
  struct Case {
    std::vector<std::string> argv;
    std::map<std::string, std::string> env;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {{"--netns", "--no-netns"}, {}, "give --netns or --no-netns, not both"},
           {{"--netns", "--backend", "slurm"}, {}, "does not combine with --backend slurm"},
           {{"--netns", "--nics", "eth0"}, {}, "does not combine with --nics"},
           {{}, {{"BULWARK_NETNS", "sometimes"}}, "BULWARK_NETNS='sometimes': use on, off or auto"}}) {
    std::vector<std::string> argv = {bulwark, "up", "--machines", "1", "--dir", dir};
    argv.insert(argv.end(), c.argv.begin(), c.argv.end());
    auto r = testing::Run(argv, c.env, 10);
    EXPECT_EQ(r.exit_code, kExitUsage) << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

// One policy file for `up` and `sim`: a bad one stops `up` before anything
// starts (no cluster directory written), and the simulator runs a good
// one's fields (its record lists the policy it ran).
TEST(CliBinary, APolicyFileIsCheckedByUpAndRunBySim) {
  const std::string bulwark = testing::BinDir() + "/bulwark", dir = testing::MakeTempDir();
  std::ofstream(dir + "/bad.yaml") << "slow_rounds: 2.5\n";
  std::ofstream(dir + "/good.yaml") << "slow_round: 4\nslow_rounds: 3\n";
  auto up = testing::Run({bulwark, "up", "--machines", "1", "--no-netns", "--dir", dir + "/c", "--policy",
                          dir + "/bad.yaml"}, {}, 10);
  EXPECT_EQ(up.exit_code, kExitUsage) << up.err;
  EXPECT_NE(up.err.find("--policy " + dir + "/bad.yaml: slow_rounds is a count: give a whole number"),
            std::string::npos) << up.err;
  EXPECT_EQ(std::count(up.err.begin(), up.err.end(), '\n'), 1) << up.err;
  EXPECT_FALSE(PathExists(dir + "/c/controller.pid")) << "nothing started";
  auto sim = testing::Run({bulwark, "sim", "--gpus", "64", "--days", "1", "--no-compare", "--json", "--policy",
                           dir + "/good.yaml"}, {}, 120);
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  const nlohmann::json record = nlohmann::json::parse(sim.out);
  const std::string text = record.dump();
  EXPECT_NE(text.find(R"("slow_round":4.0)"), std::string::npos) << "the simulated policy: " << text.substr(0, 400);
  EXPECT_NE(text.find(R"("slow_rounds":3.0)"), std::string::npos);
}

}  // namespace
}  // namespace bulwark::cli
