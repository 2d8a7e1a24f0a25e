// Crash attribution (controller/crash_attribution.h) as a table: each row is
// a crash, what came before it since the last progress, and the verdict.
#include <gtest/gtest.h>

#include <chrono>

#include "controller/crash_attribution.h"
#include "support/controller_fixture.h"

namespace bulwark::controller {
namespace {

using testing::S;

// A crash: machine, signature, exit code, site (step or kStartup), generation.
CrashRecord C(const char* machine, const char* signature, int exit_code, int64_t site, int64_t generation,
              double at_s = 0) {
  return CrashRecord{S(at_s), machine, signature, /*progress_epoch=*/0, exit_code, site, generation};
}

struct Row {
  const char* name;
  std::vector<CrashRecord> earlier;
  CrashRecord crash;
  bool recurs_here;
  int machines;  // the job's size: chance grows with it
  CrashVerdict want;
};

CrashRules Rules(int machines) {
  CrashRules r;
  r.user_code_signatures = {"command_not_found", "import_error", "syntax_error"};
  r.max_crashes_without_progress = 3;
  r.machines = machines;
  r.daily_failure_rate = 0.005;
  r.crash_loop_quantile = 0.999;
  return r;
}

TEST(CrashAttribution, TableOfCases) {
  using V = CrashVerdict;
  const std::vector<Row> rows = {
      {"a first crash is reattempted", {}, C("m02", "", 1, 11, 1), false, 4, V::kReattempt},
      {"a user-code error once is reattempted", {}, C("m02", "import_error", 1, kStartup, 2), false, 4,
       V::kReattempt},
      {"a user-code error again, anywhere, is the job's",
       {C("m01", "import_error", 1, kStartup, 1)}, C("m02", "import_error", 1, kStartup, 2), false, 4,
       V::kCodeError},
      {"the same signature on another machine is the job's",
       {C("m01", "exception", 1, 11, 1)}, C("m02", "exception", 1, kStartup, 2), false, 4, V::kFollowsJob},
      {"the same unsigned failure at the same step on another machine follows the job",
       {C("m01", "", 1, 41, 1)}, C("m02", "", 1, 41, 2), false, 4, V::kFollowsJob},
      {"the same unsigned failure at the same step on the same machine: machine or job",
       {C("m02", "", 1, 41, 1)}, C("m02", "", 1, 41, 2), true, 4, V::kRepeatsHere},
      {"the same step with another exit code is another failure",
       {C("m01", "", 1, 41, 1)}, C("m02", "", 139, 41, 2), false, 4, V::kReattempt},
      {"two unsigned start-up crashes on two machines are independent faults",
       {C("m01", "", 1, kStartup, 1)}, C("m02", "", 1, kStartup, 2), false, 4, V::kReattempt},
      {"a peer-lost exit is never evidence, even at the same step",
       {C("m01", "", 3, 41, 1)}, C("m02", "", 3, 41, 2), false, 4, V::kReattempt},
      {"a connection reset on two machines is two echoes, not the job's",
       {C("m01", "connection_reset", 1, 41, 1)}, C("m02", "connection_reset", 1, kStartup, 2), false, 4,
       V::kReattempt},
      {"a peer-lost exit on a machine that crashed before does not evict it",
       {C("m02", "", 1, 11, 1)}, C("m02", "", 3, kStartup, 2), true, 4, V::kReattempt},
      {"a rendezvous port another process holds, after a kill on the same machine, does not evict it (issue 39)",
       {C("m01", "", 0, 60, 1)}, C("m01", "port_in_use", 1, kStartup, 2), true, 4, V::kReattempt},
      {"a different crash on a machine that crashed before evicts it",
       {C("m02", "segfault", 1, 11, 1)}, C("m02", "", 1, kStartup, 2), true, 4, V::kEvictMachine},
      {"three different crashes without progress in a small job are a loop",
       {C("m01", "segfault", 1, 11, 1), C("m02", "", 1, kStartup, 2)}, C("m03", "oom", 1, kStartup, 3), false, 4,
       V::kCrashLoop},
      {"the same three crashes in a 12,500-machine job are what chance brings",
       {C("m01", "segfault", 1, 11, 1), C("m02", "", 1, kStartup, 2)}, C("m03", "oom", 1, kStartup, 3), false,
       12500, V::kReattempt},
      {"eight unrelated crashes without progress are a loop even at 12,500 machines",
       {C("m1", "", 1, kStartup, 1), C("m2", "", 1, kStartup, 2), C("m3", "", 1, kStartup, 3),
        C("m4", "", 1, kStartup, 4), C("m5", "", 1, kStartup, 5), C("m6", "", 1, kStartup, 6),
        C("m7", "", 1, kStartup, 7)},
       C("m8", "", 1, kStartup, 8), false, 12500, V::kCrashLoop},
      {"a deterministic bug at the same step is the job's at any size",
       {C("m01", "", 1, 41, 1)}, C("m07", "", 1, 41, 2), false, 12500, V::kFollowsJob},
      {"peer-lost exits never make a crash loop (issue 40)",
       {C("m01", "connection_reset", 3, kStartup, 1), C("m03", "connection_reset", 3, kStartup, 2),
        C("m03", "connection_reset", 3, kStartup, 3)},
       C("m01", "connection_reset", 3, kStartup, 4), false, 4, V::kReattempt},
      {"peer-lost exits do not count toward a loop of real crashes",
       {C("m01", "segfault", 1, 11, 1), C("m02", "", 3, kStartup, 2), C("m03", "nccl", 1, kStartup, 3)},
       C("m04", "oom", 1, kStartup, 4), false, 4, V::kReattempt},
      {"a peer-lost exit after two real crashes is not the third",
       {C("m01", "segfault", 1, 11, 1), C("m02", "", 1, kStartup, 2)}, C("m03", "connection_reset", 3, kStartup, 3),
       false, 4, V::kReattempt},
  };
  for (const Row& r : rows) {
    const CrashAttribution a =
        AttributeCrash(r.crash, r.earlier, r.recurs_here, std::chrono::minutes(10), Rules(r.machines));
    EXPECT_EQ(CrashVerdictName(a.verdict), std::string(CrashVerdictName(r.want))) << r.name << ": " << a.why;
  }
}

TEST(CrashAttribution, CrashesOfAnEarlierProgressEpochAreNotCounted) {
  CrashRecord old = C("m01", "exception", 1, 11, 1);
  old.progress_epoch = 0;
  CrashRecord now = C("m02", "exception", 1, 20, 2);
  now.progress_epoch = 1;
  const CrashAttribution a = AttributeCrash(now, {old}, false, std::chrono::minutes(10), Rules(4));
  EXPECT_EQ(a.verdict, CrashVerdict::kReattempt) << a.why;
  EXPECT_EQ(a.since_progress, 0);
}

// A failure at a step no generation got past, each generation after steps
// it redid (each restart's first step bumps the epoch): a script that exits
// 1 after its first step evicted both machines of its job, then waited for
// machines forever.
TEST(CrashAttribution, TheSameFailureAtAStepNeverCompletedFollowsTheJobAcrossEpochs) {
  CrashRecord first = C("m02", "", 1, 2, 1);
  first.furthest = 1;
  CrashRecord again = C("m01", "", 1, 2, 2);
  again.progress_epoch = 1;  // step 1 was redone after the restart
  again.furthest = 1;
  CrashAttribution a = AttributeCrash(again, {first}, false, std::chrono::minutes(10), Rules(4));
  EXPECT_EQ(a.verdict, CrashVerdict::kFollowsJob) << a.why;
  EXPECT_EQ(a.since_progress, 0) << "a crash of an earlier epoch still does not count toward a loop";
  CrashRecord here = again;
  here.machine = "m02";
  EXPECT_EQ(AttributeCrash(here, {first}, true, std::chrono::minutes(10), Rules(4)).verdict, CrashVerdict::kRepeatsHere);
  // Once the job got past that step, a failure there again is a new one.
  CrashRecord later = again;
  later.furthest = 5;
  EXPECT_EQ(AttributeCrash(later, {first}, false, std::chrono::minutes(10), Rules(4)).verdict, CrashVerdict::kReattempt);
  // Two processes killed at one step (exit code 0: a signal) are chance.
  CrashRecord killed = first, killed_again = again;
  killed.exit_code = killed_again.exit_code = 0;
  EXPECT_EQ(AttributeCrash(killed_again, {killed}, false, std::chrono::minutes(10), Rules(4)).verdict,
            CrashVerdict::kReattempt);
}

TEST(CrashAttribution, PeerLostExitsAreNotCountedAsCrashesWithoutProgress) {
  const std::vector<CrashRecord> earlier = {C("m01", "connection_reset", 3, kStartup, 1),
                                            C("m02", "segfault", 1, 11, 1), C("m03", "", 3, kStartup, 2)};
  const CrashAttribution a = AttributeCrash(C("m04", "", 1, kStartup, 3), earlier, false, std::chrono::minutes(10),
                                            Rules(4));
  EXPECT_EQ(a.since_progress, 1) << "only m02's segfault is a crash; the peer-lost exits are its echoes";
  EXPECT_EQ(a.verdict, CrashVerdict::kReattempt) << a.why;
}

TEST(CrashAttribution, WhatCountsAsPeerLost) {
  EXPECT_TRUE(IsPeerLost(3, ""));
  EXPECT_TRUE(IsPeerLost(1, "connection_reset"));
  EXPECT_TRUE(IsPeerLost(1, "nccl"));
  EXPECT_TRUE(IsPeerLost(1, "port_in_use"));
  EXPECT_FALSE(IsPeerLost(1, "exception"));
  EXPECT_FALSE(IsPeerLost(1, ""));
}

TEST(CrashAttribution, TheLoopLimitGrowsWithTheJobAndTheTimeWithoutProgress) {
  EXPECT_EQ(CrashLoopLimit(Rules(4), std::chrono::minutes(10)), 3);
  const int at_12500_short = CrashLoopLimit(Rules(12500), std::chrono::minutes(1));
  const int at_12500_long = CrashLoopLimit(Rules(12500), std::chrono::minutes(10));
  EXPECT_GT(at_12500_short, 3);
  EXPECT_GT(at_12500_long, at_12500_short);
  EXPECT_LE(at_12500_long, 12) << "a loop must still be called within a bounded number of crashes";
}

}  // namespace
}  // namespace bulwark::controller
