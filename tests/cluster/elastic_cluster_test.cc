// Elastic data parallelism end to end on a local cluster (recovery elastic,
// docs/recovery.md): a killed replica takes its state from a live peer, a
// lost machine with no standby leaves the others training on fewer
// replicas with the same global batch (the controller SIGKILLed during that
// change), a returned machine grows the job back, and the run ends bitwise
// where a fault-free run at full width ends.
// Replicas that are pipelines across machines recover the same way,
// ZeRO-1 replicas re-cut their optimizer state for the new width, and 16
// replicas in the two-level ring do all of it at that width.
// Every wait polls status or a log; no fixed sleeps.
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "support/cluster_fixture.h"
#include "support/process.h"

namespace bulwark {
namespace {

class Elastic : public Cluster {
 protected:
  // Enough for the four faults and the grow, each waiting for 10 steps
  // past the last: the grow completed at step 78 at load 5 and 70 at load
  // 15-29 (printed). The test's time is mostly the steps of this run and
  // of the fault-free reference, which runs as many.
  static constexpr int kSteps = 300;
  static constexpr int kReplicas = 3;
  std::vector<std::string> TrainerArgs(int steps = kSteps) const {
    return {"--config", "tiny", "--data", *data_, "--steps", std::to_string(steps), "--log-format", "json",
            "--threads", "1", "--dist-timeout", "10", "--eval-every", "0", "--precision", "fp32",
            "--elastic-replicas", std::to_string(kReplicas), "--micro-batches", "2"};
  }
  // Seconds from the injection to the first step rank 0 completed in the
  // generation after it (the steps after its newest restore line): the
  // survivors' stall, the first step's own compute included.
  double StallAfter(int64_t inject_ms) {
    std::ifstream in(RankLog("m01", "rank-0.log"));
    std::string line;
    int64_t first = -1;
    while (std::getline(in, line)) {
      json j = json::parse(line, nullptr, false);
      if (!j.is_object()) continue;
      if (j.value("event", "") == "restore") first = -1;
      if (j.value("event", "") == "step" && first < 0) first = j.value("wall_ms", int64_t{-1});
    }
    return first < 0 ? -1 : (first - inject_ms) / 1000.0;
  }
  // The median step_ms of rank 0's steps that completed in [from_ms,
  // to_ms), of the last generation that ran in it.
  double MedianStepMs(int64_t from_ms, int64_t to_ms) {
    std::ifstream in(RankLog("m01", "rank-0.log"));
    std::string line;
    std::vector<double> ms;
    bool in_window = false;
    while (std::getline(in, line)) {
      json j = json::parse(line, nullptr, false);
      if (!j.is_object()) continue;
      if (j.value("event", "") == "restore" && in_window) ms.clear();
      if (j.value("event", "") != "step") continue;
      const int64_t at = j.value("wall_ms", int64_t{-1});
      in_window = at >= from_ms && at < to_ms;
      if (in_window) ms.push_back(j.value("step_ms", 0.0));
    }
    if (ms.empty()) return 0;
    std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
    return ms[ms.size() / 2];
  }
  // How long rank 0 stood still around its newest restore line: from the
  // last step it completed before it to the first after it.
  double GapAtLastRestore() {
    std::ifstream in(RankLog("m01", "rank-0.log"));
    std::string line;
    int64_t last = -1, before = -1, first = -1;
    while (std::getline(in, line)) {
      json j = json::parse(line, nullptr, false);
      if (!j.is_object()) continue;
      if (j.value("event", "") == "restore") {
        before = last;
        first = -1;
      }
      if (j.value("event", "") == "step") {
        last = j.value("wall_ms", int64_t{-1});
        if (first < 0) first = last;
      }
    }
    return before < 0 || first < 0 ? -1 : (first - before) / 1000.0;
  }
  // The newest restore event of rank 0 (the trainer's "restore" line).
  // Rank 0's last start event (null when there is none).
  json LastStart() {
    std::vector<json> starts = Events(RankLog("m01", "rank-0.log"), "start");
    return starts.empty() ? json() : starts.back();
  }
  json LastRestore() {
    std::vector<json> r = Events(RankLog("m01", "rank-0.log"), "restore");
    return r.empty() ? json() : r.back();
  }
  json Progressed(const std::string& what, int64_t gen, int64_t steps_past, double seconds,
                  const std::function<bool(const json&)>& also) {
    return WaitFor(what, seconds, [&](const json& x) {
      return x["job"]["generation"] > gen && x["job"]["state"] == "running" &&
             x["job"]["last_step"] > steps_past && also(x);
    });
  }
};

TEST_F(Elastic, SurvivorsTrainOnFewerReplicasAndTheRunEndsBitwise) {
  auto up = Bulwark({"up", "--machines", std::to_string(kReplicas)});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  {
    std::ofstream job(root_ + "/job.yaml");
    job << "name: elastic\nworld_size: " << kReplicas << "\nrecovery: {mode: elastic}\nargs: [";
    for (const std::string& a : TrainerArgs()) job << "'" << a << "', ";
    job << "--memory-ckpt, 'on']\nenv: {OMP_NUM_THREADS: '1'}\n";
  }
  auto sub = Bulwark({"submit", root_ + "/job.yaml"});
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  json s = WaitFor("first steps", 90, [](const json& s) { return s["job"]["last_step"] >= 20; });
  ASSERT_EQ(s["job"]["recovery"], "elastic");
  ASSERT_EQ(s["job"]["training_world_size"], kReplicas);
  // m03 pre-spawns a spare once the job trains.
  WaitFor("m03's spare", 120, [&](const json&) { return !Events(RankLog("m03", "spare.log"), "spare_ready").empty(); });

  // 1. Rank 2 dies on m03: m03's spare takes rank 2 with the state of a
  // live peer; ranks 0 and 1 keep theirs. No one restores a checkpoint.
  int64_t gen = s["job"]["generation"], before = s["job"]["last_step"];
  Inject("kill", "m03");
  const int64_t kill_ms = inject_ms_;
  s = Progressed("kill recovered", gen, before, 90, [](const json&) { return true; });
  Report("kill");
  EXPECT_EQ(s["job"]["placement"], json({"m01", "m02", "m03"})) << "a kill restarts in place";
  std::printf("[ timing ] kill: survivors' stall %.3f s (kill -> their next completed step)\n", StallAfter(kill_ms));
  json restore = LastRestore();
  // From the lowest rank at the newest step: rank 0, or rank 1 when it
  // finished a step that rank 0's all-reduce did not.
  EXPECT_EQ(restore.value("source", "").rfind("live peer ", 0), 0u) << restore.dump();
  EXPECT_NE(ReadAll(RankLog("m03", "rank-2.log")).find("from live rank "), std::string::npos)
      << ReadAll(RankLog("m03", "rank-2.log"));
  // The generation formed from the controller's ring plans, no store
  // (rank 0 prints the start event).
  EXPECT_EQ(LastStart().value("rendezvous", ""), "plan") << LastStart().dump();

  // 2. m03 goes down with no standby: the job goes on with m01 and m02,
  // two ranks taking the six micro-batches of every step, three each. The
  // controller is SIGKILLed mid-change (m01 told to start the narrower
  // generation, m02 not yet); the one started after it replays the decision.
  gen = s["job"]["generation"];
  pid_t first = 0;
  std::ifstream(dir_ + "/controller.pid") >> first;
  ASSERT_GT(first, 0);
  ::kill(first, SIGKILL);
  ASSERT_TRUE(Dead(first, 30));
  StartController("sent:START_RANKS:m01:g" + std::to_string(gen + 1));
  WaitAgentsBack();
  before = Query("status")["job"]["last_step"];
  Inject("machine-down", "m03");
  const int64_t down_ms = inject_ms_;
  ExpectKilledAt("sent:START_RANKS:m01");
  StartController("");
  s = Progressed("narrower after machine-down", gen, before + 10, 90, [](const json& x) {
    return x["job"]["placement"] == json({"m01", "m02"});
  });
  EXPECT_EQ(s["job"]["generation"], gen + 1) << "the replayed decision is the same generation, not a second one";
  EXPECT_EQ(s["job"]["training_world_size"], 2);
  std::printf("[ timing ] machine-down with a controller SIGKILL mid-change: survivors' stall %.3f s, then 2 of 3 replicas train\n",
              StallAfter(down_ms));
  restore = LastRestore();
  EXPECT_EQ(restore.value("source", "").rfind("live", 0), 0u) << restore.dump();
  auto status = Bulwark({"status"});
  EXPECT_NE(status.out.find("training on 2 of 3 ranks"), std::string::npos) << status.out;

  // 3. m02's device fails: m01 trains alone, all six micro-batches.
  gen = s["job"]["generation"];
  before = s["job"]["last_step"];
  Inject("device-fail", "m02");
  const int64_t alone_ms = inject_ms_;
  s = Progressed("alone after device-fail", gen, before + 10, 90, [](const json& x) {
    return x["job"]["placement"] == json({"m01"});
  });
  EXPECT_EQ(s["job"]["training_world_size"], 1);
  // The incident says how many ranks trained on, and that the job is not
  // back at full width yet.
  json narrowed = Query("incidents").back();
  EXPECT_EQ(narrowed.value("trained_on", 0), 1) << narrowed.dump();
  EXPECT_GT(narrowed.value("stall_s", 0.0), 0.0) << narrowed.dump();
  EXPECT_FALSE(narrowed.contains("rejoined_ms")) << narrowed.dump();
  auto listed = Bulwark({"incidents"});
  EXPECT_NE(listed.out.find("then 1 rank(s) trained on; not at full width since"), std::string::npos) << listed.out;

  // 4. The operator returns m02: it sets up a spare of the job while m01
  // trains on, and only then does the job grow back to two replicas, m02's
  // spare taking rank 1 and its state from rank 0. m01 stops once, for the
  // regroup, not for m02's process start.
  gen = s["job"]["generation"];
  before = s["job"]["last_step"];
  const int64_t ret_ms = NowMs();
  auto ret = Bulwark({"machine", "return", "--machine", "m02"});
  ASSERT_EQ(ret.exit_code, 0) << ret.err;
  s = Progressed("grown back", gen, before + 10, 90, [](const json& x) {
    return x["job"]["placement"] == json({"m01", "m02"});
  });
  EXPECT_EQ(LastRestore().value("source", ""), "live peer 0") << "rank 0 alone held the state";
  const std::string agent = ReadAll(dir_ + "/machines/m02/agent.log");
  EXPECT_NE(agent.find("warm: "), std::string::npos) << agent;
  EXPECT_NE(agent.find("1:prespawned"), std::string::npos) << "the spare takes rank 1\n" << agent;
  std::printf("[ timing ] grow: return -> full width %.3f s; the training rank's stall %.3f s (its last step before the "
              "change -> its first after); at step %d of %d\n",
              StallAfter(ret_ms), GapAtLastRestore(), s["job"]["last_step"].get<int>(), kSteps);

  // The ledger counts a narrower step's time beyond the full width's pace
  // as degraded. On 2 cores, 3 ranks share 2 and a rank alone has one to
  // itself, so one rank's six micro-batches need not take longer than
  // three ranks' two each: the time is degraded only where they did.
  json ledger = Query("ledger");
  const double full = MedianStepMs(0, kill_ms), alone = MedianStepMs(alone_ms, ret_ms);
  std::printf("[ timing ] a step at full width %.1f ms, alone %.1f ms (median); ledger degraded %.3f s\n", full, alone,
              ledger["cumulative"]["seconds"].value("degraded", 0.0));
  if (alone > 1.5 * full) {
    EXPECT_GT(ledger["cumulative"]["seconds"].value("degraded", 0.0), 0.0) << ledger["cumulative"].dump();
  }

  // 5. The run ends where the fault-free full-width run ends, to the bit.
  s = WaitFor("job completed", 300, [](const json& x) { return x["job"]["state"] == "completed"; });
  std::vector<json> done = Events(RankLog("m01", "rank-0.log"), "done");
  ASSERT_FALSE(done.empty());
  EXPECT_EQ(done.back()["step"], kSteps);
  const std::string reference = ReferenceChecksum(TrainerArgs(), kReplicas);
  ASSERT_FALSE(reference.empty());
  EXPECT_EQ(done.back()["param_checksum"], reference) << "the elastic run diverged from the fault-free one";
}

// A rank of an elastic job hangs inside the ring's collective: the hang
// detector fires, the stacks name the ring's frames (the healthy ranks in
// an all-reduce, the hung one waiting for a frame that never comes), and
// the standby's spare takes the hung rank's slot with a live peer's state.
TEST_F(Elastic, AHangInTheRingIsTracedToItsRankAndAStandbyTakesIt) {
  auto up = Bulwark({"up", "--machines", std::to_string(kReplicas), "--standby", "1"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  {
    std::ofstream job(root_ + "/job.yaml");
    job << "name: elastic\nworld_size: " << kReplicas << "\nrecovery: {mode: elastic}\nargs: [";
    for (const std::string& a : TrainerArgs(1000000)) job << "'" << a << "', ";  // ends at the eviction
    job << "--memory-ckpt, 'on']\nenv: {OMP_NUM_THREADS: '1'}\n";
  }
  ASSERT_EQ(Bulwark({"submit", root_ + "/job.yaml"}).exit_code, 0);
  json s = WaitFor("first steps", 90, [](const json& x) { return x["job"]["last_step"] >= 60; });
  const int64_t gen = s["job"]["generation"];
  inject_ms_ = NowMs();
  auto r = Bulwark({"inject", "hang", "--machine", "m02", "--where", "collective"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  s = WaitFor("eviction of m02", 60, [&](const json& x) {
    return MachineState(x, "m02") == "evicted" && x["job"]["generation"] > gen && x["job"]["state"] == "running" &&
           x["job"]["last_step"] > s["job"]["last_step"];
  });
  Report("hang");
  json inc = Query("incidents").back();
  EXPECT_EQ(inc["class"], "implicit") << inc.dump();
  EXPECT_EQ(inc["evicted"], json({"m02"})) << inc.dump();
  ASSERT_TRUE(inc.contains("stacks")) << inc.dump();
  const json& groups = inc["stacks"]["groups"];
  ASSERT_EQ(groups.size(), 2u) << inc.dump();
  EXPECT_EQ(groups[0]["ranks"], json({0, 2})) << groups.dump();
  EXPECT_NE(groups[0]["stack"].get<std::string>().find("Ring::AllReduce"), std::string::npos) << groups.dump();
  EXPECT_NE(groups[1]["stack"].get<std::string>().find("RecvNeverSent"), std::string::npos) << groups.dump();
  EXPECT_EQ(s["job"]["placement"], json({"m01", "m04", "m03"})) << "the standby takes the hung rank's slot";
  EXPECT_EQ(LastRestore().value("source", "").rfind("live peer ", 0), 0u) << LastRestore().dump();
}

// DP 2 x PP 2 on four machines, each replica a pipeline across two (rank =
// stage x 2 + replica: m01, m03 are replica 0; m02, m04 replica 1). m04
// goes down: replica 0 keeps its processes and its state and trains on, the
// standby's spare takes m04's stage with replica 0's state of that stage,
// m02's survivor keeps its own. Then the standby's device fails, with no
// other standby: replica 0 trains alone until it is returned. The run ends
// bitwise where a fault-free run ends.
TEST_F(Elastic, APipelineReplicaLosesAMachineAndComesBackOnAStandby) {
  // Enough for the three faults and the grow, each waiting for 10 steps
  // past the last: the grow completed at step 73 at load 15-29 (printed).
  // The reference runs as many.
  constexpr int kPipeSteps = 350;
  const std::vector<std::string> args = {"--config", "tiny", "--data", *data_, "--steps", std::to_string(kPipeSteps),
                                         "--log-format", "json", "--threads", "1", "--dist-timeout", "10",
                                         "--eval-every", "0", "--precision", "fp32", "--elastic-replicas", "2",
                                         "--pp", "2", "--micro-batches", "2"};
  auto up = Bulwark({"up", "--machines", "4", "--standby", "1"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  {
    std::ofstream job(root_ + "/job.yaml");
    job << "name: elastic-pipe\nworld_size: 4\nparallel: {pp: 2}\nrecovery: {mode: elastic}\nargs: [";
    for (const std::string& a : args) job << "'" << a << "', ";
    job << "--memory-ckpt, 'on']\nenv: {OMP_NUM_THREADS: '1'}\n";
  }
  auto sub = Bulwark({"submit", root_ + "/job.yaml"});
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  json s = WaitFor("first steps", 90, [](const json& x) { return x["job"]["last_step"] >= 30; });
  ASSERT_EQ(s["job"]["placement"], json({"m01", "m02", "m03", "m04"}));
  WaitFor("m05's spare", 120, [&](const json&) { return !Events(RankLog("m05", "spare.log"), "spare_ready").empty(); });

  const int64_t gen = s["job"]["generation"], before = Query("status")["job"]["last_step"];
  Inject("machine-down", "m04");
  const int64_t down_ms = inject_ms_;
  s = Progressed("replica 1 back on the standby", gen, before + 10, 90, [](const json& x) {
    return x["job"]["placement"] == json({"m01", "m02", "m03", "m05"});
  });
  Report("machine-down");
  std::printf("[ timing ] pipeline replica lost a machine: survivors' stall %.3f s (fault -> rank 0's next step)\n",
              StallAfter(down_ms));
  // Stage 0's ranks both held the newest step: no checkpoint, no transfer.
  EXPECT_EQ(LastRestore().value("source", ""), "live") << LastRestore().dump();
  // Both rings of every stage formed from the controller's plans.
  EXPECT_EQ(LastStart().value("rendezvous", ""), "plan") << LastStart().dump();
  // m05's spare took rank 3 (stage 1 of replica 1) and its state from
  // rank 2 (stage 1 of replica 0), while the survivors kept their processes.
  const std::string agent = ReadAll(dir_ + "/machines/m05/agent.log");
  EXPECT_NE(agent.find("3:prespawned"), std::string::npos) << agent;
  const std::string joined = ReadAll(RankLog("m05", "rank-3.log"));
  EXPECT_NE(joined.find("from live rank 0 of stage 1"), std::string::npos) << joined;
  for (const auto& [machine, rank] : std::vector<std::pair<std::string, int>>{{"m01", 0}, {"m02", 1}, {"m03", 2}}) {
    std::vector<json> adopted = Events(RankLog(machine, "rank-" + std::to_string(rank) + ".log"), "adopt");
    ASSERT_FALSE(adopted.empty()) << machine;
    EXPECT_EQ(adopted.back().value("path", ""), "rejoin") << machine << " " << adopted.back().dump();
  }

  // m05's device fails with no standby left: replica 0 trains on alone,
  // its two machines renumbered (m03 is rank 1, still stage 1), and m02,
  // whose pipeline is broken, goes back to the pool and sets up a spare.
  int64_t g = s["job"]["generation"], at = s["job"]["last_step"];
  Inject("device-fail", "m05");
  const int64_t fail_ms = inject_ms_;
  s = Progressed("replica 0 alone", g, at + 10, 90, [](const json& x) {
    return x["job"]["placement"] == json({"m01", "m03"}) && MachineState(x, "m02") == "standby";
  });
  std::printf("[ timing ] device-fail with no standby: survivors' stall %.3f s, then 1 of 2 pipelines trains\n",
              StallAfter(fail_ms));
  EXPECT_EQ(s["job"]["training_world_size"], 2);
  EXPECT_EQ(LastRestore().value("source", ""), "live") << LastRestore().dump();

  // m05 is returned: with m02 it makes a whole pipeline again, and the job
  // grows back, each joiner taking its stage's state from replica 0.
  g = s["job"]["generation"];
  at = s["job"]["last_step"];
  const int64_t ret_ms = NowMs();
  auto ret = Bulwark({"machine", "return", "--machine", "m05"});
  ASSERT_EQ(ret.exit_code, 0) << ret.err;
  s = Progressed("grown back", g, at + 10, 120, [](const json& x) {
    return x["job"]["placement"] == json({"m01", "m02", "m03", "m05"});
  });
  std::printf("[ timing ] pipelines grow: return -> full width %.3f s; replica 0's stall %.3f s; at step %d of %d\n",
              StallAfter(ret_ms), GapAtLastRestore(), s["job"]["last_step"].get<int>(), kPipeSteps);
  EXPECT_EQ(LastRestore().value("source", ""), "live peer 0") << LastRestore().dump();
  EXPECT_NE(ReadAll(RankLog("m02", "rank-1.log")).find("from live rank 0 of stage 0"), std::string::npos);

  s = WaitFor("job completed", 300, [](const json& x) { return x["job"]["state"] == "completed"; });
  std::vector<json> done = Events(RankLog("m01", "rank-0.log"), "done");
  ASSERT_FALSE(done.empty());
  EXPECT_EQ(done.back()["step"], kPipeSteps);
  const std::string reference = ReferenceChecksum(args, 4);
  ASSERT_FALSE(reference.empty());
  EXPECT_EQ(done.back()["param_checksum"], reference) << "the elastic pipeline diverged from the fault-free run";
}

// Sixteen replicas, one a machine, in the two-level ring (4 x 4 groups):
// a kill is healed in place from a live peer, then a machine-down with no
// standby narrows the job to 15 replicas (the lost rank's group goes on with 3,
// the others keep their 4: the layout outlives the narrowing, 0da5f3d), and the
// run ends bitwise where a fault-free run of the same 16 replicas ends.
TEST_F(Elastic, SixteenReplicasThroughAKillAndAMachineDownEndBitwise) {
  constexpr int kWide = 16, kWideSteps = 200;
  std::vector<std::string> args = TrainerArgs(kWideSteps);
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--elastic-replicas") args[i + 1] = std::to_string(kWide);
    if (args[i] == "--micro-batches") args[i + 1] = "1";
  }
  ASSERT_EQ(Bulwark({"up", "--machines", std::to_string(kWide)}).exit_code, 0);
  {
    std::ofstream job(root_ + "/job.yaml");
    job << "name: elastic\nworld_size: " << kWide << "\nrecovery: {mode: elastic}\nargs: [";
    for (const std::string& a : args) job << "'" << a << "', ";
    job << "--memory-ckpt, 'on']\nenv: {OMP_NUM_THREADS: '1'}\n";
  }
  ASSERT_EQ(Bulwark({"submit", root_ + "/job.yaml"}).exit_code, 0);
  json s = WaitFor("first steps", 180, [](const json& x) { return x["job"]["last_step"] >= 10; });
  ASSERT_EQ(s["job"]["training_world_size"], kWide);
  WaitFor("m09's spare", 180, [&](const json&) { return !Events(RankLog("m09", "spare.log"), "spare_ready").empty(); });

  int64_t gen = s["job"]["generation"], before = s["job"]["last_step"];
  Inject("kill", "m09");
  const int64_t kill_ms = inject_ms_;
  s = Progressed("kill recovered", gen, before, 120, [](const json&) { return true; });
  EXPECT_EQ(s["job"]["placement"].size(), static_cast<size_t>(kWide)) << "a kill restarts in place";
  EXPECT_EQ(LastRestore().value("source", "").rfind("live peer ", 0), 0u) << LastRestore().dump();
  std::printf("[ timing ] 16 replicas, kill: survivors' stall %.3f s\n", StallAfter(kill_ms));

  gen = s["job"]["generation"];
  before = s["job"]["last_step"];
  Inject("machine-down", "m16");
  s = Progressed("narrower after machine-down", gen, before + 5, 120,
                 [](const json& x) { return x["job"]["placement"].size() == 15; });
  EXPECT_EQ(s["job"]["training_world_size"], 15);

  s = WaitFor("job completed", 600, [](const json& x) { return x["job"]["state"] == "completed"; });
  std::vector<json> done = Events(RankLog("m01", "rank-0.log"), "done");
  ASSERT_FALSE(done.empty());
  EXPECT_EQ(done.back()["step"], kWideSteps);
  // Any width computes the same bits (docs/recovery.md, "Any width"): the
  // fault-free run of the 16 replicas on 4 ranks.
  const std::string reference = ReferenceChecksum(args, 4);
  ASSERT_FALSE(reference.empty());
  EXPECT_EQ(done.back()["param_checksum"], reference) << "the 16-replica run diverged from the fault-free one";
}

// ZeRO-1 replicas (elastic_zero.h): each rank holds a third of the moments
// and a copy of its ring predecessor's. A kill takes rank 2's part, which
// rank 0, its backup peer, gives back to the new process; then m03 goes
// down with no standby and the three parts are re-cut for two ranks. The
// run ends bitwise where the fault-free ZeRO-1 run ends.
TEST_F(Elastic, AZeroOneJobThroughAKillAndAMachineDownEndsBitwise) {
  // Enough for both faults: the narrowing completed at step 40 at load
  // 15-47 (printed). The reference runs as many.
  constexpr int kZeroSteps = 200;
  std::vector<std::string> args = TrainerArgs(kZeroSteps);
  args.push_back("--shard-optimizer");
  ASSERT_EQ(Bulwark({"up", "--machines", std::to_string(kReplicas)}).exit_code, 0);
  {
    std::ofstream job(root_ + "/job.yaml");
    job << "name: elastic\nworld_size: " << kReplicas << "\nrecovery: {mode: elastic}\nargs: [";
    for (const std::string& a : args) job << "'" << a << "', ";
    job << "--memory-ckpt, 'on']\nenv: {OMP_NUM_THREADS: '1'}\n";
  }
  ASSERT_EQ(Bulwark({"submit", root_ + "/job.yaml"}).exit_code, 0);
  json s = WaitFor("first steps", 90, [](const json& x) { return x["job"]["last_step"] >= 20; });
  WaitFor("m03's spare", 120, [&](const json&) { return !Events(RankLog("m03", "spare.log"), "spare_ready").empty(); });

  int64_t gen = s["job"]["generation"], before = s["job"]["last_step"];
  Inject("kill", "m03");
  s = Progressed("kill recovered", gen, before, 90, [](const json&) { return true; });
  const std::string rank0 = ReadAll(RankLog("m01", "rank-0.log"));
  EXPECT_NE(rank0.find("ZeRO-1: re-cut the optimizer state of step"), std::string::npos) << rank0;

  gen = s["job"]["generation"];
  before = s["job"]["last_step"];
  Inject("machine-down", "m03");
  s = Progressed("narrower after machine-down", gen, before + 10, 90, [](const json& x) {
    return x["job"]["placement"] == json({"m01", "m02"});
  });
  EXPECT_EQ(s["job"]["training_world_size"], 2);
  std::printf("[ timing ] ZeRO-1: narrower after machine-down at step %d of %d\n", s["job"]["last_step"].get<int>(),
              kZeroSteps);
  EXPECT_NE(ReadAll(RankLog("m01", "rank-0.log")).find("for 2 ranks"), std::string::npos)
      << "the parts of three ranks re-cut for two";

  s = WaitFor("job completed", 300, [](const json& x) { return x["job"]["state"] == "completed"; });
  std::vector<json> done = Events(RankLog("m01", "rank-0.log"), "done");
  ASSERT_FALSE(done.empty());
  EXPECT_EQ(done.back()["step"], kZeroSteps);
  const std::string reference = ReferenceChecksum(args, kReplicas);
  ASSERT_FALSE(reference.empty());
  EXPECT_EQ(done.back()["param_checksum"], reference) << "the ZeRO-1 elastic run diverged from the fault-free one";
}

}  // namespace
}  // namespace bulwark
