// The fixture for end-to-end tests of bulwark-train: a data set prepared
// once per build, launching 1..N ranks with the torchrun environment,
// and reading what they printed and saved.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/record_file.h"
#include "support/process.h"
#include "trainer/state/checkpoint_dir.h"

namespace bulwark::testing {

using nlohmann::json;

inline std::string* g_data = nullptr;  // prepared once per build (PreparedCorpus)

class Trainer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (g_data) return;
    g_data = new std::string(PreparedCorpus({"--vocab-size", "512"}));
  }
  void SetUp() override { dir_ = MakeTempDir(); }
  void TearDown() override {
    if (!HasFailure()) RemoveTree(dir_).IgnoreError();  // a temporary directory; a failure keeps it to read
  }

  std::vector<std::string> Args(std::vector<std::string> extra) {
    std::vector<std::string> a = {BinDir() + "/bulwark-train", "--config", "tiny", "--data", *g_data,
                                  "--eval-every", "0", "--threads", "1", "--log-format", "json"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  // Runs `ranks` processes with the torchrun environment; returns each
  // result (a rank that never started: exit code -1 and why, on err).
  std::vector<ProcessResult> Launch(int ranks, std::vector<std::string> extra) {
    if (ranks == 1) return {testing::Run(Args(extra))};
    auto procs = StartRanks(Args(extra), ranks);
    std::vector<ProcessResult> out;
    for (auto& p : procs) out.push_back(p->Wait());
    while (static_cast<int>(out.size()) < ranks) {
      out.emplace_back();
      out.back().err = "not started: rank 0 never announced its rendezvous port:\n" + out[0].err;
    }
    return out;
  }
  // The start event's start_step: the step a run resumed from (0: fresh).
  static int64_t StartStep(const ProcessResult& r) {
    for (size_t p = 0, e; p < r.out.size(); p = e + 1) {
      e = r.out.find('\n', p);
      if (e == std::string::npos) e = r.out.size();
      json j = json::parse(r.out.substr(p, e - p), nullptr, false);
      if (j.is_object() && j.value("event", "") == "start") return j.value("start_step", int64_t{-1});
    }
    return -1;
  }
  // The done line's checksum, after checking that every rank agrees on it.
  std::string Checksum(const std::vector<ProcessResult>& rs, int64_t expect_step) {
    std::string sum;
    for (size_t r = 0; r < rs.size(); ++r) {
      EXPECT_EQ(rs[r].exit_code, 0) << "rank " << r << ":\n" << rs[r].err;
      json done = json::parse(rs[r].LastLine(), nullptr, false);
      EXPECT_EQ(done.value("event", ""), "done") << rs[r].out;
      EXPECT_EQ(done.value("step", -1), expect_step);
      std::string s = done.value("param_checksum", "");
      if (r == 0) sum = s;
      EXPECT_EQ(s, sum) << "rank " << r << " disagrees with rank 0";
    }
    return sum;
  }
  std::vector<float> SavedParams(const std::string& ckpt, int64_t step) {
    auto rec = RecordReader::Open(ckpt + "/" + trainer::StepDirName(step) + "/rank-0.bin", "ckpt");
    EXPECT_TRUE(rec.ok()) << rec.status().ToString();
    if (!rec.ok()) return {};
    auto bytes = *rec->Get("params");
    std::vector<float> v(bytes.size() / sizeof(float));
    std::memcpy(v.data(), bytes.data(), bytes.size());
    return v;
  }
  std::string dir_;
};


// One line on stderr naming the problem, a usage exit code.
inline void ExpectUsageError(const ProcessResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  size_t lines = 0;
  for (char c : r.err) lines += c == '\n';
  EXPECT_LE(lines, 2u) << r.err;
}

// The JSON objects printed on stdout with "event" == `event`.
inline std::vector<json> Events(const ProcessResult& r, const std::string& event) {
  std::vector<json> out;
  for (size_t p = 0, e; p < r.out.size(); p = e + 1) {
    e = r.out.find('\n', p);
    if (e == std::string::npos) e = r.out.size();
    json j = json::parse(r.out.substr(p, e - p), nullptr, false);
    if (!j.is_discarded() && j.value("event", "") == event) out.push_back(j);
  }
  return out;
}

}  // namespace bulwark::testing
