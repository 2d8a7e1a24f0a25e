// Implicit faults, pure: topology, the stack analyzer (on recorded real
// stacks and on synthetic topologies), the three detectors and the policy's
// rules for their events. No processes, no sockets, no sleeps.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "controller/anomaly_detector.h"
#include "controller/hang_detector.h"
#include "controller/monitors.h"
#include "controller/stack_analyzer.h"
#include "controller/topology.h"
#include "support/controller_fixture.h"

namespace bulwark::controller {
namespace {

using testing::Briefs;
using testing::Lines;
using testing::S;
using testing::Sig;
using testing::Secs;

std::string Fixture(const std::string& name) {
  std::ifstream in(std::string(BULWARK_FIXTURES) + "/stacks/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_FALSE(ss.str().empty()) << "missing fixture " << name;
  return ss.str();
}

// A synthetic eu-stack text whose main thread has `frames` (innermost first).
std::string EuStack(int pid, const std::vector<std::string>& frames) { return EuStackText(pid, frames); }

// ---------------------------------------------------------------------------
// Topology

TEST(Topology, MegatronOrderTpThenDpThenPp) {
  Topology t{32, 2, 4};  // TP=2, PP=4, DP=4 (ByteRobust's Fig. 7 layout)
  ASSERT_TRUE(t.Validate().ok());
  EXPECT_EQ(t.dp(), 4);
  // rank = tp + TP * (dp + DP * pp): rank 15 is tp 1, dp 3, stage 1.
  EXPECT_EQ(t.Of(15).tp, 1);
  EXPECT_EQ(t.Of(15).dp, 3);
  EXPECT_EQ(t.Of(15).pp, 1);
  EXPECT_EQ(t.GroupOf(GroupKind::kTP, 15).ranks, (std::vector<int>{14, 15}));
  EXPECT_EQ(t.GroupOf(GroupKind::kDP, 15).ranks, (std::vector<int>{9, 11, 13, 15}));
  EXPECT_EQ(t.GroupOf(GroupKind::kPP, 15).ranks, (std::vector<int>{7, 15, 23, 31}));
  auto g = SmallestGroupContaining(t, {7, 15, 23});
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->kind, GroupKind::kPP);
  EXPECT_EQ(g->Name(), "pp group {7,15,23,31}");
  // Ranks of two pipelines and two stages share no group.
  EXPECT_FALSE(SmallestGroupContaining(t, {15, 16}).has_value());
  // A single rank: its TP pair is the smallest group holding it.
  EXPECT_EQ(SmallestGroupContaining(t, {15})->kind, GroupKind::kTP);
  // The same numbering as bulwark-train's --pp (trainer/step/pipeline_plan.h):
  // DP x PP, rank = dp + DP * pp.
  Topology dp_pp{6, 1, 2};
  EXPECT_EQ(dp_pp.GroupOf(GroupKind::kDP, 4).ranks, (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(dp_pp.GroupOf(GroupKind::kPP, 4).ranks, (std::vector<int>{1, 4}));
}

TEST(Topology, MappingRoundTripsAndBadLayoutsNameTheFix) {
  Topology t{24, 2, 3};
  for (int r = 0; r < 24; ++r) EXPECT_EQ(t.RankAt(t.Of(r)), r);
  Status st = Topology{10, 1, 4}.Validate();
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("does not divide world_size 10"), std::string::npos) << st.message();
  EXPECT_FALSE((Topology{8, 0, 1}.Validate().ok()));
}

// ---------------------------------------------------------------------------
// Stack analyzer

TEST(StackAnalyzer, NormalizesRecordedEuStackOutput) {
  std::vector<std::string> f = NormalizeMainThread(Fixture("recv-never-sent.txt"));
  ASSERT_GE(f.size(), 4u);
  EXPECT_EQ(f.front(), "__futex_abstimed_wait_common");
  EXPECT_EQ(f[1], "pthread_cond_clockwait");  // @GLIBC_2.30 gone
  EXPECT_EQ(f[2], "gloo::transport::tcp::UnboundBuffer::waitRecv");  // arguments gone
  EXPECT_EQ(f.back(), "main");  // start-up frames gone; other threads not read
  for (const std::string& x : f) {
    EXPECT_EQ(x.find("0x"), std::string::npos) << x;
    EXPECT_EQ(x.find('('), std::string::npos) << x;
  }
  // Template noise: the autograd apply<...> frame keeps its name only.
  std::vector<std::string> c = NormalizeMainThread(Fixture("spin-in-compute.txt"));
  ASSERT_GE(c.size(), 3u);
  EXPECT_EQ(c[1], "std::enable_if::type torch::autograd::Function::apply");
}

TEST(StackAnalyzer, GdbOutputNormalizesLikeEuStack) {
  const std::string gdb =
      "Thread 1 (Thread 0x7f12 (LWP 4242) \"bulwark-train\"):\n"
      "#0  0x00007f1 in __futex_abstimed_wait_common () from /lib/x86_64-linux-gnu/libc.so.6\n"
      "#1  0x00007f2 in c10d::Work::wait(std::chrono::duration<long, std::ratio<1l, 1000l> >) () from libtorch_cpu.so\n"
      "#2  0x00005a3 in bulwark::trainer::Train (cfg=...) at src/trainer/step/train.cc:210\n"
      "#3  0x00005a4 in main (argc=5, argv=0x7ffd) at src/trainer/main.cc:80\n"
      "Thread 2 (Thread 0x7f13 (LWP 4243)):\n#0  0x00007f3 in epoll_wait () from libc.so.6\n";
  EXPECT_EQ(NormalizeMainThread(gdb), (std::vector<std::string>{"__futex_abstimed_wait_common", "c10d::Work::wait",
                                                                "bulwark::trainer::Train", "main"}));
}

TEST(StackAnalyzer, RecordedHangSingledOutTheRankInAnotherWait) {
  // Four ranks of a data-parallel job, one per machine; rank 2 waits in a
  // receive nobody sends while 0, 1, 3 wait for it in the all-reduce. The
  // recorded stacks differ in addresses and thread ids, not in signature.
  std::vector<RankStack> stacks = {{0, "m01", Fixture("allreduce-wait.txt"), ""},
                                   {1, "m02", Fixture("allreduce-wait-2.txt"), ""},
                                   {2, "m03", Fixture("recv-never-sent.txt"), ""},
                                   {3, "m04", Fixture("allreduce-wait.txt"), ""}};
  StackAnalysis a = AnalyzeStacks(stacks, Topology{4, 1, 1}, {{0, "m01"}, {1, "m02"}, {2, "m03"}, {3, "m04"}});
  ASSERT_EQ(a.groups.size(), 2u);
  EXPECT_EQ(a.groups[0].ranks, (std::vector<int>{0, 1, 3}));
  EXPECT_TRUE(a.has_majority);
  EXPECT_EQ(a.outliers, (std::vector<int>{2}));
  EXPECT_FALSE(a.group.has_value());  // data parallel: the machine itself
  EXPECT_EQ(a.suspects, (std::vector<MachineId>{"m03"}));
  EXPECT_NE(a.why.find("m03"), std::string::npos) << a.why;
}

// ByteRobust's Fig. 7 (TP=2, PP=4, DP=4 on 16 machines of 2 GPUs): one
// rank stuck in all_gather, the rest of its pipeline waiting on it in
// isend/irecv, everyone else in the all-reduce.
std::vector<RankStack> Figure7(const std::vector<int>& pipeline, int gatherer, std::map<int, MachineId>* machine_of) {
  for (int r = 0; r < 32; ++r) (*machine_of)[r] = "m" + std::to_string(10 + r / 2);
  std::vector<RankStack> stacks;
  for (int r = 0; r < 32; ++r) {
    std::vector<std::string> f = {"__futex_abstimed_wait_common", "c10d::Work::wait",
                                  "c10d::ProcessGroupNCCL::allreduce", "train_step", "main"};
    if (std::find(pipeline.begin(), pipeline.end(), r) != pipeline.end()) {
      f = {"ncclKernelWait", "c10d::ProcessGroupNCCL::recv", "irecv", "main"};
    }
    if (r == gatherer) f = {"ncclKernelWait", "c10d::ProcessGroupNCCL::_allgather_base", "all_gather_into_tensor", "main"};
    stacks.push_back({r, (*machine_of)[r], EuStack(100 + r, f), ""});
  }
  return stacks;
}

TEST(StackAnalyzer, ByteRobustFigure7OverEvictsThePipeline) {
  // In Megatron's numbering rank 15's pipeline is {7, 15, 23, 31}.
  std::map<int, MachineId> machine_of;
  StackAnalysis a = AnalyzeStacks(Figure7({7, 23, 31}, 15, &machine_of), Topology{32, 2, 4}, machine_of);
  EXPECT_EQ(a.groups.size(), 3u);
  EXPECT_EQ(a.outliers, (std::vector<int>{7, 15, 23, 31}));
  ASSERT_TRUE(a.group.has_value());
  EXPECT_EQ(a.group->Name(), "pp group {7,15,23,31}");
  EXPECT_EQ(a.suspects, (std::vector<MachineId>{"m13", "m17", "m21", "m25"}));
}

TEST(StackAnalyzer, Figure7AsNumberedInThePaperEvictsTheOutliersMachines) {
  // The paper's figure numbers the pipeline 12..15; in Megatron's order
  // those four ranks are two replicas of one stage, which no single group
  // holds, so the outliers' own machines go: the same two machines.
  std::map<int, MachineId> machine_of;
  StackAnalysis a = AnalyzeStacks(Figure7({12, 13, 14}, 15, &machine_of), Topology{32, 2, 4}, machine_of);
  EXPECT_EQ(a.outliers, (std::vector<int>{12, 13, 14, 15}));
  EXPECT_FALSE(a.group.has_value());
  EXPECT_EQ(a.suspects, (std::vector<MachineId>{"m16", "m17"}));
}

TEST(StackAnalyzer, OneOutlierInAPipelineEvictsItsWholeStageGroup) {
  Topology t{8, 1, 2};  // PP=2, DP=4: pipelines {0,4} {1,5} {2,6} {3,7}
  std::map<int, MachineId> m;
  for (int r = 0; r < 8; ++r) m[r] = "m0" + std::to_string(r + 1);
  std::vector<RankStack> stacks;
  for (int r = 0; r < 8; ++r) {
    stacks.push_back({r, m[r], EuStack(r + 10, r == 5 ? std::vector<std::string>{"spin", "main"}
                                                         : std::vector<std::string>{"wait", "main"}), ""});
  }
  StackAnalysis a = AnalyzeStacks(stacks, t, m);
  // The smallest group holding rank 5 is its pipeline {1,5}: over-evict both machines.
  ASSERT_TRUE(a.group.has_value());
  EXPECT_EQ(a.group->kind, GroupKind::kPP);
  EXPECT_EQ(a.suspects, (std::vector<MachineId>{"m02", "m06"}));
}

// Python ranks (the tracer's spliced frames, agent/python_stack.h): the
// same native wait, different Python call sites.
std::vector<std::string> GlooWaitIn(const std::vector<std::string>& python) {
  std::vector<std::string> f = {"__futex_abstimed_wait_common", "pthread_cond_clockwait",
                                "gloo::transport::tcp::UnboundBuffer::waitRecv", "gloo::allreduce",
                                "c10d::ProcessGroupGloo::AsyncAllreduceWork::run", "c10d::Work::wait",
                                "torch::distributed::c10d::(anonymous namespace)::all_reduce", "pybind11::cpp_function::dispatcher",
                                "cfunction_call", "_PyObject_MakeTpCall", "PyObject_Vectorcall", "??",
                                "_PyEval_EvalFrameDefault"};
  // What the tracer does: the evaluation loop's frame replaced by the Python ones.
  f.pop_back();
  for (const std::string& p : python) f.push_back("[py] " + p);
  f.push_back("PyEval_EvalCode");
  return f;
}

TEST(StackAnalyzer, PythonFramesKeepTheirNameAndLineWithoutTheDirectory) {
  std::vector<std::string> f = NormalizeMainThread(
      EuStack(7, GlooWaitIn({"all_reduce (/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py:1536)",
                             "train.<locals>.step (/home/a/run-7/train.py:42)", "<module> (/home/a/run-7/train.py:90)"})));
  ASSERT_GE(f.size(), 4u);
  EXPECT_EQ(f[f.size() - 4], "[py] all_reduce (distributed_c10d.py:1536)");
  EXPECT_EQ(f[f.size() - 3], "[py] train.<locals>.step (train.py:42)");  // <locals> is no template
  EXPECT_EQ(f[f.size() - 2], "[py] <module> (train.py:90)");
  EXPECT_TRUE(IsPythonFrame(f[f.size() - 2]));
  EXPECT_FALSE(IsPythonFrame(f.front()));
}

TEST(StackAnalyzer, RanksWaitingInTheSameNativeCodeAtDifferentPythonCallSitesGroupApart) {
  // Ranks 0, 1, 3 wait in the gradients' all-reduce; rank 2 in another
  // all-reduce, the loader's. Natively alike (one group of four, "all
  // ranks wait in the same place"); in Python, rank 2 is the odd one out.
  std::map<int, MachineId> m{{0, "m01"}, {1, "m02"}, {2, "m03"}, {3, "m04"}};
  std::vector<RankStack> stacks;
  for (int r = 0; r < 4; ++r) {
    const std::string site = r == 2 ? "next_batch (/data/r2/train.py:31)" : "step (/data/r" + std::to_string(r) + "/train.py:57)";
    stacks.push_back({r, m[r], EuStack(r, GlooWaitIn({"all_reduce (/t/distributed_c10d.py:1536)", site,
                                                      "main (/data/train.py:90)"})), ""});
  }
  StackAnalysis a = AnalyzeStacks(stacks, Topology{4, 1, 1}, m);
  ASSERT_EQ(a.groups.size(), 2u);
  EXPECT_EQ(a.groups[0].ranks, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(a.outliers, (std::vector<int>{2}));
  EXPECT_EQ(a.suspects, (std::vector<MachineId>{"m03"}));
  // Both are in the all-reduce; the call sites that took them there differ.
  EXPECT_NE(a.why.find("; in Python the outliers are at all_reduce (distributed_c10d.py:1536) via next_batch "
                       "(train.py:31), the others at all_reduce (distributed_c10d.py:1536) via step (train.py:57)"),
            std::string::npos)
      << a.why;
  // For people: the innermost frames are all native, so the summary goes on
  // to the Python frames below them.
  const std::string odd = SummarizeFrames(a.groups[1].frames);
  EXPECT_NE(odd.find(" < ... < [py] all_reduce (distributed_c10d.py:1536) < [py] next_batch (train.py:31) < [py] main "
                     "(train.py:90)"),
            std::string::npos)
      << odd;
  EXPECT_EQ(odd.find("PyEval_EvalCode"), std::string::npos) << odd;
  // Without Python frames, the summary is the innermost frames as before.
  EXPECT_EQ(SummarizeFrames({"a", "b", "main"}, 2), "a < b");
}

TEST(StackAnalyzer, TiesEmptinessAndUniformityEvictNobody) {
  std::map<int, MachineId> m{{0, "m01"}, {1, "m02"}, {2, "m03"}, {3, "m04"}};
  // Two ranks, two stacks: no majority to call healthy.
  StackAnalysis tie = AnalyzeStacks({{0, "m01", EuStack(1, {"a", "main"}), ""}, {1, "m02", EuStack(2, {"b", "main"}), ""}},
                                    Topology{2, 1, 1}, m);
  EXPECT_FALSE(tie.has_majority);
  EXPECT_TRUE(tie.suspects.empty());
  EXPECT_NE(tie.why.find("no majority"), std::string::npos) << tie.why;
  // Nothing captured.
  StackAnalysis none = AnalyzeStacks({{0, "m01", "", "process gone"}}, Topology{4, 1, 1}, m);
  EXPECT_TRUE(none.groups.empty());
  EXPECT_TRUE(none.suspects.empty());
  EXPECT_EQ(none.missing.size(), 4u);
  // Everyone waits in the same place.
  std::vector<RankStack> same;
  for (int r = 0; r < 4; ++r) same.push_back({r, m[r], EuStack(r, {"wait", "main"}), ""});
  StackAnalysis uniform = AnalyzeStacks(same, Topology{4, 1, 1}, m);
  EXPECT_TRUE(uniform.outliers.empty());
  EXPECT_TRUE(uniform.suspects.empty());
  // A rank whose stack could not be taken is an outlier.
  same.pop_back();
  StackAnalysis missing = AnalyzeStacks(same, Topology{4, 1, 1}, m);
  EXPECT_EQ(missing.missing, (std::vector<int>{3}));
  EXPECT_EQ(missing.suspects, (std::vector<MachineId>{"m04"}));
  // Half the job "outlying": too many to trust the other half.
  std::vector<RankStack> split;
  for (int r = 0; r < 4; ++r) split.push_back({r, m[r], EuStack(r, {r < 2 ? "a" : "b", "main"}), ""});
  split[3] = {3, "m04", EuStack(3, {"c", "main"}), ""};
  StackAnalysis half = AnalyzeStacks(split, Topology{4, 1, 1}, m);
  EXPECT_TRUE(half.suspects.empty());
}

// ---------------------------------------------------------------------------
// Detectors

TEST(HangDetector, LearnsTheStepTimeAndFiresOncePastTheAllowance) {
  PolicyConfig c;
  HangDetector h(c);
  h.Started(S(0));
  for (int k = 1; k <= 30; ++k) h.Observe(Sig("m01", 0, k, S(1 + 0.1 * k)));
  // 100 ms steps x 5 is under the 2 s floor.
  EXPECT_EQ(h.Allowance(), Secs(2));
  EXPECT_FALSE(h.Check(S(4.0 + 1.9)).has_value());
  auto hang = h.Check(S(4.0 + 2.1));
  ASSERT_TRUE(hang.has_value());
  EXPECT_EQ(hang->last_step, 30);
  EXPECT_EQ(hang->since, S(4.0));
  EXPECT_FALSE(h.Check(S(10)).has_value()) << "fires once per stall";
  // Progress re-arms it.
  h.Observe(Sig("m01", 0, 31, S(11)));
  EXPECT_TRUE(h.Check(S(13.5)).has_value());
}

TEST(HangDetector, RanksThatNeverReportAreNeverCalledHung) {
  PolicyConfig c;
  HangDetector h(c);
  h.Started(S(0));
  EXPECT_FALSE(h.Check(S(3600)).has_value()) << "a program that does not speak the rank link";
  h.Started(S(4000));
  h.Observe(RankPhase{"m01", 0, "start", Secs(0), S(4001)});  // it connected, then went quiet
  EXPECT_EQ(h.Allowance(), c.hang_first_step) << "connecting is no phase";
  EXPECT_TRUE(h.Check(S(4000) + c.hang_first_step + Secs(1)).has_value());
}

// Issue 37: a controller rebuilt from its journal starts its detectors
// afresh. Ranks that had reported steps, one of them hung just before the
// SIGKILL, never speak again: started as after a restart of the ranks
// (waiting for a rank to say something) it never fires; resumed, it fires
// after the first step's allowance, the learned step time having died with
// the old process.
TEST(HangDetector, ARankHungAcrossAControllerRestartIsSuspected) {
  PolicyConfig c;
  HangDetector before(c);
  before.Started(S(0));
  for (int k = 1; k <= 20; ++k) before.Observe(Sig("m01", 0, k, S(0.1 * k)));
  EXPECT_EQ(before.Allowance(), Secs(2)) << "the old controller had learned 100 ms steps";

  HangDetector fresh(c);  // what the restarted controller rebuilt until now
  fresh.Started(S(10));
  EXPECT_FALSE(fresh.Check(S(10) + c.hang_first_step * 10).has_value()) << "never armed: nobody spoke";

  HangDetector resumed(c);
  resumed.Resumed(S(10), /*last_step=*/20);
  EXPECT_EQ(resumed.Allowance(), c.hang_first_step);
  EXPECT_FALSE(resumed.Check(S(10) + c.hang_first_step - Secs(1)).has_value());
  auto hang = resumed.Check(S(10) + c.hang_first_step + Secs(1));
  ASSERT_TRUE(hang.has_value());
  EXPECT_EQ(hang->last_step, 20);
  EXPECT_FALSE(hang->first_step) << "the ranks stepped, under the old controller";
  EXPECT_EQ(hang->since, S(10));

  // Ranks that were fine report their next step: warm already, so its time
  // is learned at once and the next stall gets the 2 s floor, not 60 s.
  HangDetector healthy(c);
  healthy.Resumed(S(10), 20);
  healthy.Observe(Sig("m01", 0, 21, S(10.1)));
  EXPECT_EQ(healthy.Allowance(), Secs(2));
  EXPECT_FALSE(healthy.Check(S(12)).has_value());
  EXPECT_TRUE(healthy.Check(S(12.2)).has_value());
}

TEST(HangDetector, SlowStepsFirstStepsAndPhasesGetLongerAllowances) {
  PolicyConfig c;
  HangDetector h(c);
  h.Started(S(0));
  h.Observe(RankPhase{"m01", 0, "start", Secs(0), S(0.5)});
  EXPECT_EQ(h.Allowance(), c.hang_first_step);
  EXPECT_FALSE(h.Check(S(59)).has_value());
  auto first = h.Check(S(61));
  ASSERT_TRUE(first.has_value());
  EXPECT_TRUE(first->first_step);

  h.Started(S(100));
  for (int k = 1; k <= 20; ++k) h.Observe(Sig("m01", 0, k, S(100 + k), /*step_ms=*/1000));
  EXPECT_EQ(h.Allowance(), Secs(5));  // 5 x 1 s
  h.Observe(RankPhase{"m01", 0, "eval", Secs(8), S(121), 20});
  EXPECT_EQ(h.Allowance(), Secs(40));
  EXPECT_FALSE(h.Check(S(121 + 39)).has_value());
  EXPECT_TRUE(h.Check(S(121 + 41)).has_value());
  // A phase that follows a step older than one already seen is over.
  h.Observe(Sig("m01", 0, 22, S(200), 1000));
  h.Observe(RankPhase{"m02", 1, "checkpoint", Secs(10), S(200.5), 21});
  EXPECT_EQ(h.Allowance(), Secs(5));
  h.Stop();
  EXPECT_FALSE(h.Check(S(1000)).has_value());
}

TEST(HangDetector, WarmUpStepsAfterARestartAreNotLearnedFrom) {
  PolicyConfig c;
  HangDetector h(c);
  h.Started(S(0));
  // The first steps after a start are slow (first checkpoint copies...).
  for (int k = 1; k <= 4; ++k) h.Observe(Sig("m01", 0, k, S(3 * k), 3000));
  EXPECT_EQ(h.Allowance(), c.hang_first_step);
  EXPECT_FALSE(h.Check(S(12 + 5)).has_value());
  for (int k = 5; k <= 30; ++k) h.Observe(Sig("m01", 0, k, S(12 + 0.1 * k)));
  EXPECT_EQ(h.Allowance(), Secs(2)) << "the slow warm-up steps did not raise the learned time";
}

TEST(AnomalyDetector, ALocalNanNamesItsMachineAsSoonAsEveryRankReported) {
  PolicyConfig c;
  AnomalyDetector d(c);
  d.Started(S(0), 4);
  for (int k = 1; k <= 30; ++k) {
    for (int r = 0; r < 4; ++r) d.Observe(Sig("m0" + std::to_string(r + 1), r, k, S(k)));
  }
  for (int r = 0; r < 4; ++r) {
    RankSignal s = Sig("m0" + std::to_string(r + 1), r, 31, S(31.2), 100, 80, 3.0, std::nan(""));
    s.nonfinite = true;
    s.halted = "nan";
    s.local_nonfinite = r == 1;
    s.local_grad_norm = r == 1 ? std::nan("") : 1.0;
    d.Observe(s);
    if (r < 3) {
      EXPECT_FALSE(d.Check(S(31.3)).has_value()) << "waits for every rank's report";
    }
  }
  auto a = d.Check(S(31.3));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->kind, "nan");
  EXPECT_EQ(a->step, 31);
  EXPECT_EQ(a->culprits, (std::vector<MachineId>{"m02"}));
  EXPECT_EQ(a->culprit_ranks, (std::vector<int>{1}));
  EXPECT_TRUE(a->halted);
  EXPECT_EQ(a->at, S(31.2));
  EXPECT_FALSE(d.Check(S(40)).has_value()) << "reported once";
}

TEST(AnomalyDetector, ASpikeWithNoCulpritIsReportedAfterTheWait) {
  PolicyConfig c;
  AnomalyDetector d(c);
  d.Started(S(0), 2);
  for (int k = 1; k <= 30; ++k) d.Observe(Sig("m01", 0, k, S(k), 100, 80, 3.0 + 0.01 * k));
  // Loss 5x its median is no spike; above it is.
  EXPECT_FALSE(AnomalyDetector::IsSpike(3.0 * 4.9, std::deque<double>(25, 3.0), 5, 20));
  EXPECT_TRUE(AnomalyDetector::IsSpike(3.0 * 5.1, std::deque<double>(25, 3.0), 5, 20));
  EXPECT_FALSE(AnomalyDetector::IsSpike(1e9, std::deque<double>(5, 3.0), 5, 20)) << "too little history";
  d.Observe(Sig("m01", 0, 31, S(31), 100, 80, 40.0));
  EXPECT_FALSE(d.Check(S(32)).has_value()) << "rank 1 may still report";
  auto a = d.Check(S(31) + c.anomaly_wait);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->kind, "spike");
  EXPECT_TRUE(a->culprits.empty());
  EXPECT_NE(a->detail.find("1/2 ranks reported"), std::string::npos) << a->detail;
}

// A job with no checkpoint restarts from step 0: its first losses are
// those of an untrained model, not spikes against the late-training median.
// A restart from memory keeps the history of the steps before it, so a
// spike right after it is still one.
TEST(AnomalyDetector, ARestartForgetsTheStepsItRedoes) {
  PolicyConfig c;
  AnomalyDetector d(c);
  d.Started(S(0), 1);
  for (int k = 1; k <= 100; ++k) d.Observe(Sig("m01", 0, k, S(k), 100, 80, 10.0 / k));
  d.Started(S(101), 1);  // from step 0
  for (int k = 1; k <= 10; ++k) {
    d.Observe(Sig("m01", 0, k, S(101 + k), 100, 80, 10.0 / k));
    EXPECT_FALSE(d.Check(S(101 + k) + c.anomaly_wait).has_value()) << "step " << k << " of the rerun";
  }
  for (int k = 11; k <= 100; ++k) d.Observe(Sig("m01", 0, k, S(101 + k), 100, 80, 10.0 / k));
  d.Started(S(300), 1);  // from memory, at step 99
  d.Observe(Sig("m01", 0, 100, S(301), 100, 80, 10.0));
  auto a = d.Check(S(301) + c.anomaly_wait);
  ASSERT_TRUE(a.has_value()) << "the history before step 100 is the restored run's past";
  EXPECT_EQ(a->step, 100);
  EXPECT_EQ(a->kind, "spike");
}

TEST(Monitors, FollowTheDecisionsAndStayQuietWhileDisarmed) {
  PolicyConfig c;
  Monitors m(c);
  EXPECT_TRUE(m.Check(S(100)).empty()) << "not armed before a start";
  Action restart = RestartAllAction(Placement{1, 1, {"m01", "m02"}}, 0, "start");
  m.AfterActions({restart}, S(0), Topology{2, 1, 1});
  EXPECT_TRUE(m.armed());
  for (int k = 1; k <= 20; ++k) {
    m.Observe(Sig("m01", 0, k, S(k * 0.1)));
    m.Observe(Sig("m02", 1, k, S(k * 0.1)));
  }
  auto found = m.Check(S(5));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(KindOf(found[0]), EventKind::kHangSuspected);
  m.AfterActions({StopJobAction(1, "stop")}, S(6), Topology{2, 1, 1});
  EXPECT_TRUE(m.Check(S(100)).empty());
}

}  // namespace
}  // namespace bulwark::controller
