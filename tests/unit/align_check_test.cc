// The periodic bitwise check beside the ranks (policy_align.cc), pure: due
// on time, one check at a time, the drifting machine evicted as its own
// incident while the job never stopped for a clean check, and so is a
// machine whose own GPUs disagreed; silent machines, failed runs, no
// majority and late answers evict nobody.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "controller/ladder.h"
#include "controller/policy.h"
#include "support/controller_fixture.h"

namespace bulwark::controller {
namespace {

using testing::Job;
using testing::Lines;
using testing::S;
using testing::Secs;

// Machine `m`'s answer to check `check`: a hash, or (empty) a run that made none.
DiagnosticsReported Answer(int64_t check, const MachineId& m, const std::string& hash, double t) {
  DiagnosticsReported d;
  d.check = check;
  d.machine = m;
  d.results = {{"alignment", !hash.empty(), hash.empty() ? "the alignment run exited 137 without a hash" : "", 900}};
  d.alignment_hash = hash;
  d.observed = S(t);
  return d;
}

// A 4-machine job checked every 60 s; steps 1..6 every 10 s (the clock starts at 10 s).
struct Checked : Job {
  explicit Checked(int machines = 4) : Job(machines, 2, Config()) { StartAndRun(6); }
  static PolicyConfig Config() {
    PolicyConfig c;
    c.ladder.align_every = Secs(60);
    return c;
  }
  Lines Do(const Event& e) { return testing::Briefs(Job::Do(e)); }
  bool Due(double t) const { return AlignmentCheckIsDue(controller->state(), Config().ladder, S(t)); }
  const AlignCheckState& align() const { return controller->state().align; }
};

TEST(AlignCheck, ACleanCheckRunsBesideTheRanksAndOpensNothing) {
  Checked j;
  EXPECT_FALSE(j.Due(69));
  EXPECT_TRUE(j.Due(70));
  PolicyConfig off;
  EXPECT_FALSE(AlignmentCheckIsDue(j.controller->state(), off.ladder, S(1000))) << "off by default";
  EXPECT_TRUE(j.Do(AlignmentCheckDue{S(65)}).empty()) << "an early event decides nothing";
  EXPECT_EQ(j.Do(AlignmentCheckDue{S(70)}), (Lines{"align_check c1 m01,m02,m03,m04"}));
  EXPECT_TRUE(j.Do(AlignmentCheckDue{S(71)}).empty()) << "one check at a time";
  EXPECT_FALSE(j.Due(129)) << "not again before its deadline";
  EXPECT_EQ(j.controller->state().job, JobState::kRunning) << "the ranks train on";
  j.RunSteps(7, 7, S(72));  // steps go on while it runs
  for (const char* m : {"m01", "m02", "m03"}) EXPECT_TRUE(j.Do(Answer(1, m, "good", 73)).empty());
  EXPECT_TRUE(j.Do(Answer(1, "m04", "good", 74)).empty());
  EXPECT_EQ(j.align().id, 0);
  EXPECT_EQ(j.align().clean, 1);
  EXPECT_EQ(j.align().last, "periodic bitwise check 1: all 4 machine(s) agree (good)");
  EXPECT_TRUE(j.controller->incidents().empty());
  EXPECT_EQ(j.controller->state().ladder.state, LadderState::kIdle);
  // The next one counts from the start of this one.
  EXPECT_FALSE(j.Due(129));
  EXPECT_EQ(j.Do(AlignmentCheckDue{S(130)}), (Lines{"align_check c2 m01,m02,m03,m04"}));
}

TEST(AlignCheck, TheMachineThatDiffersFromTheMajorityIsEvictedAndReplaced) {
  Checked j;
  j.Do(AlignmentCheckDue{S(70)});
  for (const char* m : {"m01", "m02", "m04"}) j.Do(Answer(1, m, "good", 73));
  EXPECT_EQ(j.Do(Answer(1, "m03", "drifted", 74)),
            (Lines{"evict m03", "activate s01", "restart_all g2 m01,m02,s01,m04 ckpt 6 rollback<=0 fresh"}))
      << "no clean check yet: the drift may date from the start";
  const Incident& inc = j.controller->incidents().back();
  EXPECT_EQ(inc.cause, "periodic bitwise check 1");
  EXPECT_EQ(inc.cls, IncidentClass::kImplicit);
  EXPECT_EQ(inc.evicted, (std::vector<MachineId>{"m03"}));
  EXPECT_EQ(inc.why, "evicted by the periodic bitwise check 1 beside the ranks: m03: alignment hash drifted differs "
                     "from the majority's good (3 of 4 machine(s))");
  EXPECT_EQ(j.align().clean, 0);
  EXPECT_EQ(j.controller->state().ladder.state, LadderState::kIdle) << "a machine fault: no ladder";
}

TEST(AlignCheck, SilentAndFailedMachinesAndNoMajorityEvictNobody) {
  Checked j;
  j.Do(AlignmentCheckDue{S(70)});
  j.Do(Answer(1, "m01", "good", 72));
  j.Do(Answer(1, "m02", "good", 72));
  j.Do(Answer(1, "m03", "", 72));  // its run made no hash: noted, not held against it
  EXPECT_FALSE(j.Due(129));
  EXPECT_TRUE(j.Due(130)) << "m04 is silent: the deadline judges what came in";
  EXPECT_TRUE(j.Do(AlignmentCheckDue{S(130)}).empty());
  EXPECT_EQ(j.align().last,
            "periodic bitwise check 1: all 2 machine(s) agree (good); 1 machine(s) made no hash (m03: the "
            "alignment run exited 137 without a hash); 1 did not answer within 1min");
  EXPECT_TRUE(j.Do(Answer(1, "m04", "drifted", 131)).empty()) << "a late answer is no evidence";
  EXPECT_TRUE(j.controller->incidents().empty());

  // Two machines that disagree: which one drifts cannot be told.
  Checked two(2);
  two.Do(AlignmentCheckDue{S(70)});
  two.Do(Answer(1, "m01", "good", 72));
  EXPECT_TRUE(two.Do(Answer(1, "m02", "drifted", 72)).empty());
  EXPECT_EQ(two.align().last, "periodic bitwise check 1: no strict majority among the hashes of 2 machine(s); "
                              "nobody evicted");
  EXPECT_TRUE(two.controller->incidents().empty());
}

// The drift entered the weights after the last clean check started (every
// machine was sound then): the restart that replaces the drifting machine
// discards every newer copy and restores at most that check's step, and
// each check asks the agents to keep the persisted steps such a rollback
// may need. The first step after it ends the rollback.
TEST(AlignCheck, ADriftFoundAfterACleanCheckRollsBackToThatChecksStep) {
  Checked j;
  Lines started = j.Do(AlignmentCheckDue{S(70)});
  ASSERT_EQ(started, (Lines{"align_check c1 m01,m02,m03,m04"}));
  for (const char* m : {"m01", "m02", "m03", "m04"}) j.Do(Answer(1, m, "good", 72));
  ASSERT_EQ(j.align().clean_step, 6) << "check 1 started at step 6";
  j.RunSteps(7, 12, S(75));
  std::vector<Action> second = j.Job::Do(AlignmentCheckDue{S(130)});
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].keep_steps, (std::vector<int64_t>{6, 12})) << "the last clean check's step, and this one's";
  for (const char* m : {"m01", "m02", "m04"}) j.Do(Answer(2, m, "good", 132));
  EXPECT_EQ(j.Do(Answer(2, "m03", "drifted", 133)),
            (Lines{"evict m03", "activate s01", "restart_all g2 m01,m02,s01,m04 ckpt 12 rollback<=6 fresh"}));
  const Incident& inc = j.controller->incidents().back();
  EXPECT_EQ(inc.notes.back(), "rolled back to step 6 at most (the last clean check's start): the steps after it may "
                              "hold the drift");
  EXPECT_EQ(j.align().clean_step, 6) << "a check that found a drift is not clean";
  j.RunSteps(7, 7, S(140));  // the restored run's first step
  EXPECT_FALSE(j.controller->state().rollback_to.has_value());
}

// A GPU machine's run compares its own GPUs too (trainer/diag/align.h): a
// machine whose GPUs disagreed among themselves is evicted on its own word,
// even where no majority of machines could outvote it.
TEST(AlignCheck, AMachineWhoseOwnGpusDisagreeIsEvictedWithoutAMajority) {
  Checked two(2);
  two.Do(AlignmentCheckDue{S(70)});
  two.Do(Answer(1, "m01", "good", 72));
  DiagnosticsReported bad = Answer(1, "m02", "c0ffee", 72);
  bad.results[0].passed = false;
  bad.results[0].detail = "the machine's GPUs disagree: GPU 3 computed c0ffee; the other 7 GPUs good";
  EXPECT_EQ(two.Do(bad), (Lines{"evict m02", "activate s01", "restart_all g2 m01,s01 ckpt 6 rollback<=0 fresh"}));
  const Incident& inc = two.controller->incidents().back();
  EXPECT_EQ(inc.evicted, (std::vector<MachineId>{"m02"}));
  EXPECT_EQ(inc.why, "evicted by the periodic bitwise check 1 beside the ranks: m02: the machine's GPUs disagree: "
                     "GPU 3 computed c0ffee; the other 7 GPUs good");
}

// A check that ends after the job stopped (its own error meanwhile) says
// what it found and evicts nobody: a stopped job has no machines to replace.
TEST(AlignCheck, ACheckEndingAfterTheJobStoppedEvictsNobody) {
  Checked j;
  j.Do(AlignmentCheckDue{S(70)});
  // The same error on two machines with no step between: the job's code, so it stops.
  j.Do(testing::Crash("m01", "exception", S(71)));
  j.Do(testing::Crash("m02", "exception", S(72)));
  ASSERT_EQ(j.controller->state().job, JobState::kStopped);
  for (const char* m : {"m01", "m02", "m04"}) j.Do(Answer(1, m, "good", 75));
  EXPECT_TRUE(j.Do(Answer(1, "m03", "drifted", 76)).empty());
  EXPECT_NE(j.align().last.find("m03: alignment hash drifted differs"), std::string::npos) << j.align().last;
  EXPECT_NE(j.align().last.find("the job had stopped: nobody evicted"), std::string::npos) << j.align().last;
}

TEST(AlignCheck, NoCheckStartsWhileAnIncidentIsOpen) {
  Checked j;
  j.Do(testing::Crash("m02", "segfault", S(65)));
  EXPECT_FALSE(j.Due(70)) << "the job is recovering";
  EXPECT_TRUE(j.Do(AlignmentCheckDue{S(70)}).empty());
}

}  // namespace
}  // namespace bulwark::controller
