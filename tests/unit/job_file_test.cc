// The job file (cli/job_file.h): its fields, their defaults, and the one-line
// errors of a malformed one.
#include <gtest/gtest.h>

#include <map>

#include "cli/job_file.h"
#include "common/progress_pattern.h"

namespace bulwark {
namespace {

Result<cli::JobFile> Parse(const std::string& extra) {
  return cli::ParseJobFile("name: demo\nworld_size: 2\n" + extra, "job.yaml", "/bin/bulwark-train");
}

TEST(JobFile, PersistIntervalDefaultsToFifty) {
  auto j = Parse("");
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->persist_every, cli::JobFile::kDefaultPersistEvery);
  EXPECT_EQ(j->persist_every, 50);
}

TEST(JobFile, PersistIntervalIsReadFromTheCheckpointSection) {
  auto j = Parse("checkpoint: {persist_every: 10}\n");
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->persist_every, 10);
  j = Parse("checkpoint:\n  persist_every: 0\n");  // never persist: memory and peers only
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->persist_every, 0);
  j = Parse("checkpoint: {}\n");
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->persist_every, 50);
}

void ExpectFieldError(const std::string& extra, const std::string& field, const std::string& hint) {
  auto j = Parse(extra);
  ASSERT_FALSE(j.ok()) << extra;
  EXPECT_EQ(j.status().code(), Status::Code::kInvalidArgument);
  const std::string& msg = j.status().message();
  EXPECT_NE(msg.find("job.yaml: field '" + field + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(hint), std::string::npos) << msg;
}

TEST(JobFile, MalformedCheckpointSectionNamesTheFieldAndTheFix) {
  ExpectFieldError("checkpoint: 50\n", "checkpoint", "checkpoint: {persist_every: 50}");
  ExpectFieldError("checkpoint: [50]\n", "checkpoint", "checkpoint: {persist_every: 50}");
  ExpectFieldError("checkpoint: {persist_every: often}\n", "checkpoint.persist_every", "got 'often'");
  ExpectFieldError("checkpoint: {persist_every: -5}\n", "checkpoint.persist_every", "0 never persists");
  ExpectFieldError("checkpoint: {persist_every: 2.5}\n", "checkpoint.persist_every", "whole number");
  ExpectFieldError("checkpoint: {persist_evry: 5}\n", "checkpoint.persist_evry", "known: persist_every");
}

TEST(JobFile, RecoveryModeIsStandbyElasticOrRequeue) {
  auto j = Parse("");
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->recovery, "standby");
  for (const char* mode : {"standby", "elastic", "requeue"}) {
    j = Parse(std::string("recovery: {mode: ") + mode + "}\n");
    ASSERT_TRUE(j.ok()) << j.status().ToString();
    EXPECT_EQ(j->recovery, mode);
  }
  ExpectFieldError("recovery: {mode: shrink}\n", "recovery.mode", "elastic (the surviving replicas train on)");
}

}  // namespace
}  // namespace bulwark

namespace bulwark {
namespace {

// parallel: the layout the analyzer and the backup planner use.
TEST(JobFile, ParallelLayoutIsReadAndCheckedAgainstTheWorld) {
  auto j = cli::ParseJobFile("name: pp\nworld_size: 4\nparallel: {pp: 2}\n", "job.yaml", "/bin/bulwark-train");
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->pp, 2);
  EXPECT_EQ(j->tp, 1);
  j = cli::ParseJobFile("name: d\nworld_size: 2\n", "job.yaml", "/bin/bulwark-train");
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->pp, 1) << "default: pure data parallel";
  for (const auto& [text, hint] : std::vector<std::pair<std::string, std::string>>{
           {"parallel: {pp: 3}\n", "must divide world_size 4"},
           {"parallel: {pp: 2, dp: 4}\n", "must equal world_size 4"},
           {"parallel: {ep: 2}\n", "known: tp, pp, dp"},
           {"parallel: {pp: 0}\n", "parallel.pp"},
           {"parallel: 2\n", "expected a mapping"},
           {"args: [--pp, '2']\n", "the args say --pp 2 but the job declares pp 1"},
           {"parallel: {pp: 2}\nargs: [--pp, '4']\n", "add 'parallel: {pp: 4}'"}}) {
    auto bad = cli::ParseJobFile("name: pp\nworld_size: 4\n" + text, "job.yaml", "/bin/bulwark-train");
    ASSERT_FALSE(bad.ok()) << text;
    EXPECT_NE(bad.status().message().find(hint), std::string::npos) << bad.status().message();
  }
}

}  // namespace
}  // namespace bulwark

namespace bulwark {
namespace {

// progress: steps read from the output of a job that does not speak the
// rank link (common/progress_pattern.h).
TEST(JobFile, ProgressRegexTravelsInTheEnvironment) {
  auto j = Parse("progress: {regex: 'step (?P<step>\\d+) loss (?P<loss>\\S+)'}\n");
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->progress_regex, "step (?P<step>\\d+) loss (?P<loss>\\S+)");
  EXPECT_EQ(j->env.at(kProgressRegexEnv), j->progress_regex);
  j = Parse("");
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->env.count(kProgressRegexEnv), 0u) << "no progress section, nothing in the environment";
}

TEST(JobFile, BadProgressRegexIsAOneLineErrorAtSubmit) {
  for (const auto& [text, hint] : std::vector<std::pair<std::string, std::string>>{
           {"progress: {regex: 'step (\\d+)'}\n", "no (?P<step>...) group"},
           {"progress: {regex: 'step (?P<step>\\d+'}\n", "not a valid regular expression"},
           {"progress: {regex: '(?P<step>\\d+) (?P<lr>\\S+)'}\n", "unknown group 'lr'; known: step, loss"},
           {"progress: {regex: '(?P<step>\\d+) (?P<step>\\d+)'}\n", "appears twice"},
           {"progress: {regex: '(?P<step>\\d+)(?P=step)'}\n", "back-references"},
           {"progress: {regex: '(?P<step\\d+)'}\n", "unterminated group name"},
           {"progress: {pattern: 'x'}\n", "known: regex"},
           {"progress: {}\n", "required: a regular expression"},
           {"progress: 'step (?P<step>\\d+)'\n", "expected a mapping"},
           {"progress: {regex: '(?P<step>\\d+)'}\nenv: {BULWARK_PROGRESS_REGEX: x}\n", "keep one"}}) {
    auto bad = Parse(text);
    ASSERT_FALSE(bad.ok()) << text;
    const std::string& msg = bad.status().message();
    EXPECT_NE(msg.find("job.yaml: field 'progress"), std::string::npos) << msg;
    EXPECT_NE(msg.find(hint), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(ProgressPattern, NamedGroupsBecomeNumberedOnesAroundOtherGroups) {
  // A capture group before the named ones, a non-capturing one, parentheses
  // escaped and inside a character class: none may shift the numbering.
  auto p = ProgressPattern::Compile("(iter|step)(?:\\s*[(:])\\s*(?P<step>\\d+)\\(x\\) .*loss[=:] ?(?<loss>[0-9.eE+-]+)");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->ecmascript(), "(iter|step)(?:\\s*[(:])\\s*(\\d+)\\(x\\) .*loss[=:] ?([0-9.eE+-]+)");
  auto m = p->Match("[rank0] step: 120(x) lr 3e-4 loss=2.5e-1 ok");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->step, 120);
  ASSERT_TRUE(m->loss.has_value());
  EXPECT_DOUBLE_EQ(*m->loss, 0.25);
  EXPECT_FALSE(p->Match("step: 120 no loss here").has_value());
  EXPECT_FALSE(p->Match("unrelated line").has_value());
}

TEST(ProgressPattern, AClassStartingWithABracketIsNotItsEnd) {
  auto p = ProgressPattern::Compile("[](]+ (?P<step>\\d+)");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto m = p->Match("]( 7");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->step, 7);
  EXPECT_FALSE(m->loss.has_value());
}

// libstdc++'s recursive matcher would overflow the agent's stack on a long
// line under '.*'; such lines are skipped, and huge patterns refused.
TEST(ProgressPattern, LongLinesAreSkippedAndHugePatternsRefused) {
  auto p = ProgressPattern::Compile(".*step (?P<step>\\d+)");
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->Match(std::string(1 << 20, 'x') + " step 3").has_value());
  EXPECT_EQ(p->Match(std::string(100, 'x') + " step 3")->step, 3);
  auto huge = ProgressPattern::Compile("(?P<step>\\d+)" + std::string(1000, 'a'));
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("longer than 512"), std::string::npos) << huge.status().message();
}

TEST(ProgressPattern, AStepThatIsNotAWholeNumberIsNoMatch) {
  auto p = ProgressPattern::Compile("step (?P<step>\\S+)");
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->Match("step 1.5").has_value());
  EXPECT_FALSE(p->Match("step -3").has_value());
  EXPECT_EQ(p->Match("step 42")->step, 42);
}

}  // namespace
}  // namespace bulwark

// --- the fields every job has -------------------------------------------

namespace bulwark {
namespace {

TEST(JobFile, ParsesFieldsAndDefaultsTheCommand) {
  auto j = cli::ParseJobFile("name: demo\nworld_size: 4\nranks_per_machine: 2\nargs: [--config, tiny]\n"
                             "env: {OMP_NUM_THREADS: 1}\n", "job.yaml", "/bin/bulwark-train");
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->name, "demo");
  EXPECT_EQ(j->world_size, 4);
  EXPECT_EQ(j->ranks_per_machine, 2);
  EXPECT_EQ(j->argv, (std::vector<std::string>{"/bin/bulwark-train", "--config", "tiny"}));
  EXPECT_EQ(j->env.at("OMP_NUM_THREADS"), "1");
}

TEST(JobFile, AnyCommandWorks) {
  auto j = cli::ParseJobFile("name: x\nworld_size: 1\ncommand: python3 train.py\n", "job.yaml", "unused");
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->argv, (std::vector<std::string>{"python3", "train.py"}));
}

void ExpectFieldError(const std::string& yaml, const std::string& field) {
  auto j = cli::ParseJobFile(yaml, "job.yaml", "t");
  ASSERT_FALSE(j.ok()) << yaml;
  EXPECT_EQ(j.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(j.status().message().find("job.yaml: field '" + field + "'"), std::string::npos) << j.status().message();
}

TEST(JobFile, MalformedSpecNamesTheField) {
  ExpectFieldError("world_size: 2\n", "name");
  ExpectFieldError("name: a\n", "world_size");
  ExpectFieldError("name: a\nworld_size: two\n", "world_size");
  ExpectFieldError("name: a\nworld_size: -1\n", "world_size");
  ExpectFieldError("name: a\nworld_size: 3\nranks_per_machine: 2\n", "ranks_per_machine");
  ExpectFieldError("name: a\nworld_size: 1\nargs: {a: b}\n", "args");
  ExpectFieldError("name: a\nworld_size: 1\nenv: [x]\n", "env");
  ExpectFieldError("name: a\nworld_size: 1\nwrold_size: 2\n", "wrold_size");
}

TEST(JobFile, BrokenYamlSaysWhere) {
  auto j = cli::ParseJobFile("name: [unclosed\n", "job.yaml", "t");
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find("job.yaml: not valid YAML at line"), std::string::npos) << j.status().message();
}

// A job's own thresholds: numbers and flags by the policy's field names,
// checked as the controller will apply them.
TEST(JobFile, APolicySectionIsReadAndCheckedByField) {
  auto j = Parse("policy: {slow_round: 5, slow_rounds: 3, checkup_evicted: false}\n");
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->policy, (std::map<std::string, double>{{"checkup_evicted", 0}, {"slow_round", 5}, {"slow_rounds", 3}}));
  EXPECT_TRUE(Parse("")->policy.empty());
  EXPECT_EQ(Parse("policy: {slow_rund: 5}\n").status().message(),
            "job.yaml: policy: unknown field 'slow_rund'; did you mean 'slow_round'? (the fields: "
            "docs/control-plane.md, \"The policy a cluster runs with\")");
  EXPECT_EQ(Parse("policy: {slow_round: soon}\n").status().message(),
            "job.yaml: policy: slow_round must be a number (times in seconds), got \"soon\"");
  EXPECT_EQ(Parse("policy: [slow_round]\n").status().message(),
            "job.yaml: policy: expected a mapping of field: value, e.g. {slow_round: 10, slow_rounds: 5}");
  EXPECT_FALSE(Parse("policy: {slow_rounds: 2.5}\n").ok()) << "a count is whole";
}

}  // namespace
}  // namespace bulwark
