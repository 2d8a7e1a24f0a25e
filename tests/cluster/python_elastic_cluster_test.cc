// A PyTorch script's replicas train on through faults (python/bulwark/
// elastic.py: recovery elastic for a Python job, docs/recovery.md), on a
// real local cluster: python/examples/gpt_train.py --elastic-replicas 4 on
// 4 machines and a standby.
//
//   kill          the killed rank's slot goes to its machine's pre-spawned
//                 spare, which takes a live peer's state; the other three
//                 keep their processes (rejoin) and redo the step it broke;
//   machine-down  the standby's spare takes the dead machine's slot;
//   device-fail   with no standby left, three replicas train on with the
//                 four replicas' micro-batches (the global batch kept);
//   return        the machine's spare joins and the job is back at four.
//
// No rank restores a checkpoint, no incident loses more than a step, and
// the run ends on the bits of the fault-free run (the script alone, one
// process computing every micro-batch). The survivors' stall (injection ->
// their next completed step) is printed, not asserted: bench/python has
// the figures. Every wait polls status or a log; no fixed sleeps.
#include <gtest/gtest.h>

#include <signal.h>

#include <fstream>

#include "support/cluster_fixture.h"
#include "support/process.h"

namespace bulwark {
namespace {

const std::string kScript = std::string(BULWARK_PYTHON_DIR) + "/examples/gpt_train.py";

class PythonElastic : public Cluster {
 protected:
  static void SetUpTestSuite() {}  // no trainer corpus needed
  static constexpr int kReplicas = 4;
  static constexpr int kSteps = 1000;
  std::vector<std::string> ScriptArgs() const {
    return {kScript, "--elastic-replicas", std::to_string(kReplicas), "--steps", std::to_string(kSteps)};
  }
  // The first step a rank completed in `generation` (its regrouped event),
  // as seconds after `from_ms`; -1 when there is none.
  double StallSince(int64_t from_ms, int64_t generation) {
    for (const json& e : Events(RankLog("m01", "rank-0.log"), "regrouped")) {
      if (e.value("generation", int64_t{-1}) == generation) return (e.value("wall_ms", int64_t{0}) - from_ms) / 1000.0;
    }
    return -1;
  }
  json After(const std::string& what, int64_t gen, int64_t steps_past, const std::function<bool(const json&)>& also) {
    return WaitFor(what, 120, [&](const json& x) {
      return x["job"]["generation"] > gen && x["job"]["state"] == "running" && x["job"]["last_step"] > steps_past &&
             also(x);
    });
  }
  // The newest incident: at most one step lost, and said so.
  void ExpectAtMostOneStepLost(const std::string& fault) {
    Report(fault);
    json inc = Query("incidents");
    ASSERT_TRUE(inc.is_array() && !inc.empty());
    EXPECT_LE(inc.back().value("lost_steps", 99), 1) << inc.back().dump();
  }
  std::string Path(const std::string& machine, int rank, int64_t gen) {
    const auto b = Banners(RankLog(machine, "rank-" + std::to_string(rank) + ".log"));
    return b.count(gen) ? b.at(gen).first : "";
  }
};

TEST_F(PythonElastic, ReplicasOfAPyTorchScriptTrainOnThroughEveryFaultAndEndBitwise) {
  auto torch = testing::Run({BULWARK_TORCH_PYTHON, "-c", "import torch"}, {}, 120);
  ASSERT_EQ(torch.exit_code, 0) << BULWARK_TORCH_PYTHON << " cannot import torch: run scripts/install-python.sh";
  auto up = Bulwark({"up", "--machines", std::to_string(kReplicas), "--standby", "1"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  {
    std::ofstream job(root_ + "/job.yaml");
    job << "name: gpt\nworld_size: " << kReplicas << "\nrecovery: {mode: elastic}\ncommand: [" << BULWARK_TORCH_PYTHON;
    for (const std::string& a : ScriptArgs()) job << ", '" << a << "'";
    job << "]\nenv: {OMP_NUM_THREADS: '1', PYTHONUNBUFFERED: '1'}\n";
  }
  auto sub = Bulwark({"submit", root_ + "/job.yaml"});
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  json s = WaitFor("first steps", 120, [](const json& x) { return x["job"]["last_step"] >= 20; });
  ASSERT_EQ(s["job"]["recovery"], "elastic");
  // m02 has its spare set up (torch imported, the model built) first.
  ASSERT_TRUE(WaitForEvent("m02's spare", RankLog("m02", "spare.log"), "spare_ready", 120).is_object());

  // 1. A kill: m02's spare takes rank 1, the others rejoin in their processes.
  int64_t gen = s["job"]["generation"], before = s["job"]["last_step"];
  ASSERT_LT(before, kSteps / 2) << "the job ran too fast for its faults";
  Inject("kill", "m02");
  const int64_t kill_ms = inject_ms_;
  s = After("kill recovered", gen, before, [](const json&) { return true; });
  ExpectAtMostOneStepLost("kill");
  EXPECT_EQ(s["job"]["placement"], json({"m01", "m02", "m03", "m04"}));
  const int64_t g1 = s["job"]["generation"];
  for (const auto& [m, r] : std::vector<std::pair<std::string, int>>{{"m01", 0}, {"m03", 2}, {"m04", 3}}) {
    EXPECT_EQ(Path(m, r, g1), "rejoin") << m << ": a survivor keeps its process\n" << ReadAll(RankLog(m, "rank-" + std::to_string(r) + ".log"));
  }
  EXPECT_EQ(Path("m02", 1, g1), "prespawned") << ReadAll(RankLog("m02", "rank-1.log"));
  EXPECT_NE(ReadAll(RankLog("m02", "rank-1.log")).find("state from live rank "), std::string::npos);
  std::printf("[ timing ] python elastic kill: survivors' stall %.3f s (kill -> their next completed step)\n",
              StallSince(kill_ms, g1));

  // 2. m03 goes down: the standby's spare takes rank 2.
  gen = g1;
  before = s["job"]["last_step"];
  WaitForEvent("m05's warm spare", RankLog("m05", "spare.log"), "spare_ready", 120);
  Inject("machine-down", "m03");
  const int64_t down_ms = inject_ms_;
  s = After("machine-down recovered", gen, before, [](const json& x) {
    return x["job"]["placement"] == json({"m01", "m02", "m05", "m04"});
  });
  ExpectAtMostOneStepLost("machine-down");
  const int64_t g2 = s["job"]["generation"];
  EXPECT_EQ(Path("m05", 2, g2), "prespawned") << ReadAll(RankLog("m05", "rank-2.log"));
  EXPECT_EQ(Path("m01", 0, g2), "rejoin");
  std::printf("[ timing ] python elastic machine-down: survivors' stall %.3f s\n", StallSince(down_ms, g2));

  // 3. m04's device fails and no standby is left: three replicas train on.
  gen = g2;
  before = s["job"]["last_step"];
  Inject("device-fail", "m04");
  const int64_t narrow_ms = inject_ms_;
  s = After("narrower", gen, before + 10, [](const json& x) { return x["job"]["training_world_size"] == 3; });
  ExpectAtMostOneStepLost("device-fail");
  const int64_t g3 = s["job"]["generation"];
  EXPECT_EQ(Path("m01", 0, g3), "rejoin");
  std::printf("[ timing ] python elastic device-fail, no standby: survivors' stall %.3f s, then 3 of 4 replicas\n",
              StallSince(narrow_ms, g3));
  EXPECT_NE(Bulwark({"status"}).out.find("training on 3 of 4 ranks"), std::string::npos);

  // 4. m04 returns: its spare joins with a live peer's state.
  gen = g3;
  before = s["job"]["last_step"];
  const int64_t ret_ms = NowMs();
  ASSERT_EQ(Bulwark({"machine", "return", "--machine", "m04"}).exit_code, 0);
  s = After("grown back", gen, before + 10, [](const json& x) { return x["job"]["training_world_size"] == 4; });
  const int64_t g4 = s["job"]["generation"];
  EXPECT_EQ(Path("m01", 0, g4), "rejoin");
  std::printf("[ timing ] python elastic grow: return -> the first step at 4 %.3f s, at step %d of %d\n",
              StallSince(ret_ms, g4), s["job"]["last_step"].get<int>(), kSteps);

  // 5. The end: the fault-free run's bits, and no checkpoint ever read.
  s = WaitFor("job completed", 600, [](const json& x) { return x["job"]["state"] == "completed"; });
  std::vector<json> done = Events(RankLog("m01", "rank-0.log"), "done");
  ASSERT_FALSE(done.empty()) << ReadAll(RankLog("m01", "rank-0.log"));
  EXPECT_EQ(done.back()["step"], kSteps);
  std::vector<std::string> ref = {BULWARK_TORCH_PYTHON};
  for (const std::string& a : ScriptArgs()) ref.push_back(a);
  auto alone = testing::Run(ref, {{"OMP_NUM_THREADS", "1"}}, 900);
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  const size_t at = alone.out.rfind("{\"event\": \"done\"");
  ASSERT_NE(at, std::string::npos) << alone.out;
  json reference = json::parse(alone.out.substr(at, alone.out.find('\n', at) - at));
  EXPECT_EQ(done.back()["param_checksum"], reference["param_checksum"]) << "the run diverged from the fault-free one";
  for (const char* m : {"m01", "m02", "m04", "m05"}) {
    for (int r = 0; r < kReplicas; ++r) {
      EXPECT_EQ(ReadAll(RankLog(m, "rank-" + std::to_string(r) + ".log")).find("resumed after step"), std::string::npos);
    }
  }
}

// `bulwark run --recovery elastic` with a script that does not use
// bulwark.elastic: refused at submit in one line that names the script and
// the fix, and nothing is left running.
TEST_F(PythonElastic, RunWithElasticRecoveryRefusesAScriptThatDoesNotSpeakIt) {
  const std::string ddp = std::string(BULWARK_PYTHON_DIR) + "/examples/ddp_train.py";
  auto r = testing::Run({testing::BinDir() + "/bulwark", "run", "--machines", "2", "--recovery", "elastic", "--dir", dir_,
                         "--", BULWARK_TORCH_PYTHON, ddp, "--steps", "5"},
                        {}, 180);
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.err.find(ddp + " does not use bulwark.elastic"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("use recovery standby"), std::string::npos) << r.err;
  int pid = 0;
  std::ifstream(dir_ + "/controller.pid") >> pid;
  EXPECT_TRUE(pid == 0 || Dead(pid, 30)) << "bulwark run left the controller up";
}

}  // namespace
}  // namespace bulwark
