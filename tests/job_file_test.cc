// The job file's checkpoint section. (The other fields' specifications live
// with the agent's tests in agent_test.cc.)
#include <gtest/gtest.h>

#include "cli/job_file.h"

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
