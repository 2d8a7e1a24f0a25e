// Jobs that are not bulwark-train, end to end on a real local cluster: a
// shell script whose printed steps are its progress (progress: {regex}), a
// Python script reporting through the Python client, and the controller's
// Prometheus endpoint as a scraper sees it. No libtorch: these run without
// bulwark-train.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <regex>
#include <memory>
#include <csignal>
#include <filesystem>

#include "support/cluster_fixture.h"
#include "support/pythons.h"

namespace bulwark {
namespace {

class Ecosystem : public Cluster {
 protected:
  // Hides Cluster's, which prepares the trainer's corpus: nothing here needs it.
  static void SetUpTestSuite() {}

  // A job that speaks no bulwark protocol: it prints "step N loss X" every
  // 200 ms, and prints nothing while the hang file exists.
  void WriteScriptJob(int world_size) {
    const std::string script = root_ + "/train.sh";
    std::ofstream(script) << "#!/bin/bash\n"
                          << "for ((i = 1; ; i++)); do\n"
                          << "  while [[ -e " << HangFile() << " ]]; do sleep 0.1; done\n"
                          << "  echo \"[rank $RANK] step $i loss 2.$((i % 10)) lr 3e-4\"\n"
                          << "  sleep 0.2\n"
                          << "done\n";
    ::chmod(script.c_str(), 0755);
    std::ofstream(root_ + "/job.yaml") << "name: script\nworld_size: " << world_size << "\n"
                                       << "command: [" << script << "]\n"
                                       << "progress: {regex: 'step (?P<step>\\d+) loss (?P<loss>[0-9.]+)'}\n";
  }
  std::string HangFile() const { return root_ + "/hang"; }

  // Below (a Python job whose ranks block at different call sites).
  void PythonCallSitesSingleOutTheOutlier(const std::string& interpreter);

  void UpAndSubmit(std::vector<std::string> up_flags = {}) {
    std::vector<std::string> up = {"up", "--machines", "2", "--standby", "1"};
    up.insert(up.end(), up_flags.begin(), up_flags.end());
    auto r = Bulwark(up);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    WriteScriptJob(2);
    r = Bulwark({"submit", root_ + "/job.yaml"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
};

TEST_F(Ecosystem, AScriptsPrintedStepsAreItsProgressAndItsSilenceAHang) {
  UpAndSubmit();
  json s = WaitFor("steps read from the script's output", 30, [](const json& s) {
    return s["job"]["state"] == "running" && s["job"]["last_step"] >= 10;
  });
  // The human status line shows the step too.
  auto human = Bulwark({"status"});
  EXPECT_NE(human.out.find("job script: running, step "), std::string::npos) << human.out;
  json ledger = Query("ledger");
  const double productive = ledger["cumulative"]["seconds"]["productive"].get<double>();
  EXPECT_GT(productive, 1.0) << ledger.dump();
  // The hang detector learned the 200 ms steps: the 2 s floor.
  EXPECT_TRUE(s["job"]["detectors"]["armed"].get<bool>()) << s.dump();

  std::ofstream(HangFile()) << "stop printing\n";
  inject_ms_ = NowMs();
  s = WaitFor("the silence to be called a hang", 20, [](const json& s) { return s["job"]["incidents"] >= 1; });
  // The incident opens at detection and is resolved once the stacks are in.
  json inc;
  WaitFor("the hang's stacks analyzed", 20, [&](const json&) {
    json all = Query("incidents");
    if (!all.is_array() || all.empty()) return false;
    inc = all.back();
    return inc.value("resolution", "open") != "open";
  });
  Report("script hang");
  EXPECT_EQ(inc["class"], "implicit") << inc.dump();
  EXPECT_NE(inc["cause"].get<std::string>().find("hang suspected"), std::string::npos) << inc.dump();
  EXPECT_LT(inc["detect_s"].get<double>(), 5.0) << inc.dump();
  // Both ranks wait in the same place: nothing to evict, a reattempt.
  EXPECT_EQ(inc["resolution"], "reattempt") << inc.dump();
  std::remove(HangFile().c_str());
  WaitFor("the restarted script's steps", 30, [](const json& s) {
    return s["job"]["generation"] >= 2 && s["job"]["state"] == "running" && s["job"]["last_step"] >= 3;
  });
}

// A plain python3 job reporting through the Python client (python/bulwark):
// no progress pattern and no JSON lines, only bulwark.step() over the rank
// link. Its steps show in status, count as productive, and its silence is a
// hang.
TEST_F(Ecosystem, APythonJobReportingWithTheClientShowsStepsAndItsHangIsDetected) {
  auto up = Bulwark({"up", "--machines", "2", "--standby", "1"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  std::ofstream(root_ + "/train.py") << "import os, time\n"
                                      << "import bulwark\n"
                                      << "hang = os.environ['HANG_FILE']\n"
                                      << "step = 0\n"
                                      << "while True:\n"
                                      << "    while os.path.exists(hang):\n"
                                      << "        time.sleep(0.1)\n"
                                      << "    time.sleep(0.2)\n"
                                      << "    step += 1\n"
                                      << "    bulwark.step(step, loss=2.0 + 1.0 / step, grad_norm=1.0)\n";
  std::ofstream(root_ + "/job.yaml") << "name: py\nworld_size: 2\n"
                                     << "command: [/usr/bin/python3, " << root_ << "/train.py]\n"
                                     << "env: {PYTHONPATH: " << BULWARK_PYTHON_DIR << ", HANG_FILE: " << HangFile()
                                     << ", PYTHONUNBUFFERED: '1'}\n";
  auto r = Bulwark({"submit", root_ + "/job.yaml"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  WaitFor("the client's steps", 30, [](const json& s) {
    return s["job"]["state"] == "running" && s["job"]["last_step"] >= 10;
  });
  json ledger = Query("ledger");
  EXPECT_GT(ledger["cumulative"]["seconds"]["productive"].get<double>(), 1.0) << ledger.dump();

  std::ofstream(HangFile()) << "stop reporting\n";
  inject_ms_ = NowMs();
  WaitFor("the silence to be called a hang", 20, [](const json& s) { return s["job"]["incidents"] >= 1; });
  json inc = Query("incidents").back();
  Report("python hang");
  EXPECT_EQ(inc["class"], "implicit") << inc.dump();
  EXPECT_NE(inc["cause"].get<std::string>().find("hang suspected"), std::string::npos) << inc.dump();
  EXPECT_LT(inc["detect_s"].get<double>(), 5.0) << inc.dump();
  std::remove(HangFile().c_str());
  WaitFor("the restarted job's steps", 30, [](const json& s) {
    return s["job"]["generation"] >= 2 && s["job"]["state"] == "running" && s["job"]["last_step"] >= 3;
  });
}

// A job that ends is done, whatever it printed: a script with no done line
// and no client, whose ranks print their steps, keep their own checkpoint
// (a file per rank) and exit 0 at their last step. `crash_once`: rank 1
// exits 3 right after its last checkpoint, the first time only.
void WriteEndingScriptJob(const std::string& root, bool crash_once) {
  const std::string script = root + "/train.sh";
  std::ofstream(script) << "#!/bin/bash\n"
                        << "ckpt=" << root << "/ckpt-$RANK\n"
                        << "start=$(cat $ckpt 2>/dev/null || echo 0)\n"
                        << "echo \"[rank $RANK] resuming after step $start\"\n"
                        << "last=$((20 + 3 * RANK))\n"  // rank 1 trains three steps longer than rank 0
                        << "for ((i = start + 1; i <= last; i++)); do\n"
                        << "  echo \"[rank $RANK] step $i loss 2.$((i % 10))\"\n"
                        << "  echo $i > $ckpt\n"
                        << "  sleep 0.1\n"
                        << "done\n"
                        << (crash_once ? "if [[ $RANK == 1 && ! -e " + root + "/crashed ]]; then\n"
                                         "  touch " + root + "/crashed; echo 'rank 1: crashing after its last checkpoint'; exit 3\n"
                                         "fi\n"
                                       : "")
                        << "exit 0\n";
  ::chmod(script.c_str(), 0755);
  std::ofstream(root + "/job.yaml") << "name: ends\nworld_size: 2\n"
                                    << "command: [" << script << "]\n"
                                    << "progress: {regex: 'step (?P<step>\\d+) loss (?P<loss>[0-9.]+)'}\n";
}

// Two machines and a standby run WriteEndingScriptJob's job.
class EndingJob : public Ecosystem {
 protected:
  void SubmitEndingScriptJob(bool crash_once) {
    auto r = Bulwark({"up", "--machines", "2", "--standby", "1"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    WriteEndingScriptJob(root_, crash_once);
    r = Bulwark({"submit", root_ + "/job.yaml"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
};

TEST_F(EndingJob, AForeignJobWhoseRanksExitZeroIsCompletedAtItsLastStep) {
  ASSERT_NO_FATAL_FAILURE(SubmitEndingScriptJob(/*crash_once=*/false));
  json s = WaitFor("the script's end", 60, [](const json& s) { return s["job"]["state"] == "completed"; });
  // Rank 0 ended at step 20 while rank 1 trained on; it was waited for,
  // and its step 23 is the last one seen.
  EXPECT_EQ(s["job"]["done_step"], 23) << s.dump();
  EXPECT_EQ(s["job"]["done_why"], "every rank of generation 1 exited 0") << s.dump();
  EXPECT_EQ(s["job"]["generation"], 1) << s.dump();
  EXPECT_EQ(s["job"]["incidents"], 0) << s.dump();
  auto human = Bulwark({"status"});
  EXPECT_NE(human.out.find("job ends: completed at step 23 (every rank of generation 1 exited 0)"), std::string::npos)
      << human.out;
  // Well past the hang detector's learned allowance (2 s): a finished job
  // is not a hung one, and is never restarted.
  std::this_thread::sleep_for(std::chrono::seconds(6));
  s = Query("status");
  EXPECT_EQ(s["job"]["state"], "completed") << s.dump();
  EXPECT_EQ(s["job"]["generation"], 1) << s.dump();
  EXPECT_EQ(s["job"]["incidents"], 0) << s.dump();
}

TEST_F(EndingJob, AForeignJobRestartedAtItsFinalStepCompletesAgainInsteadOfLooping) {
  ASSERT_NO_FATAL_FAILURE(SubmitEndingScriptJob(/*crash_once=*/true));
  // Rank 0 ended with 0 at step 20, rank 1 failed after step 23: an
  // incident, and a restart of both that resumes at their final steps;
  // they print no step and exit 0 at once.
  json s = WaitFor("the restarted script's end", 90, [](const json& s) { return s["job"]["state"] == "completed"; });
  EXPECT_EQ(s["job"]["done_step"], 23) << s.dump();
  EXPECT_EQ(s["job"]["generation"], 2) << s.dump();
  EXPECT_EQ(s["job"]["incidents"], 1) << s.dump();
  std::this_thread::sleep_for(std::chrono::seconds(6));
  s = Query("status");
  EXPECT_EQ(s["job"]["state"], "completed") << s.dump();
  EXPECT_EQ(s["job"]["generation"], 2) << s.dump();
  EXPECT_EQ(s["job"]["incidents"], 1) << s.dump();
}

// A Python job on 3 machines whose ranks, once the hang file appears (first
// generation only), block in time.sleep: rank 2 in its data loader, the
// others in their "all-reduce". Natively the three stacks are alike (the
// same sleep under the same evaluation loop), so only their Python frames
// (agent/python_stack.h) single out rank 2, and its machine is evicted.
void Ecosystem::PythonCallSitesSingleOutTheOutlier(const std::string& interpreter) {
  const std::string& root = root_;
  if (interpreter.empty()) {
    GTEST_SKIP() << "no such CPython 3.11 on this host (" << testing::PythonCoverage(11, 11) << ")";
  }
  auto r = Bulwark({"up", "--machines", "3", "--standby", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ofstream(root + "/train.py") << "import os, time\n"                                        // 1
                                    << "hang = os.environ['HANG_FILE']\n"                         // 2
                                    << "first = os.environ['TORCHELASTIC_RESTART_COUNT'] == '0'\n"  // 3
                                    << "def load_batch():\n"                                      // 4
                                    << "    time.sleep(3600)\n"                                   // 5
                                    << "def all_reduce_grads():\n"                                // 6
                                    << "    time.sleep(3600)\n"                                   // 7
                                    << "def train():\n"                                           // 8
                                    << "    for step in range(1, 1000000):\n"                     // 9
                                    << "        if first and os.path.exists(hang):\n"             // 10
                                    << "            if os.environ['RANK'] == '2':\n"              // 11
                                    << "                load_batch()\n"                           // 12
                                    << "            all_reduce_grads()\n"                         // 13
                                    << "        print(f'step {step} loss 2.5', flush=True)\n"     // 14
                                    << "        time.sleep(0.2)\n"                                // 15
                                    << "train()\n";                                               // 16
  std::ofstream(root + "/job.yaml") << "name: pyhang\nworld_size: 3\n"
                                    << "command: [" << interpreter << ", " << root << "/train.py]\n"
                                    << "progress: {regex: 'step (?P<step>\\d+) loss (?P<loss>[0-9.]+)'}\n"
                                    << "env: {HANG_FILE: " << root << "/hang}\n";
  r = Bulwark({"submit", root + "/job.yaml"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  WaitFor("steps", 60, [](const json& s) { return s["job"]["state"] == "running" && s["job"]["last_step"] >= 10; });
  std::ofstream(root + "/hang") << "block\n";
  json s = WaitFor("m03's eviction", 60, [](const json& s) {
    return MachineState(s, "m03") == "evicted" && s["job"]["generation"] >= 2 && s["job"]["state"] == "running";
  });
  json inc = Query("incidents").back();
  EXPECT_EQ(inc["evicted"], json({"m03"})) << inc.dump();
  ASSERT_TRUE(inc.contains("stacks")) << inc.dump();
  const json& groups = inc["stacks"]["groups"];
  ASSERT_EQ(groups.size(), 2u) << inc.dump();
  EXPECT_EQ(groups[0]["ranks"], json({0, 1}));
  EXPECT_EQ(groups[1]["ranks"], json({2}));
  EXPECT_NE(groups[0]["stack"].get<std::string>().find("[py] all_reduce_grads (train.py:7) < [py] train (train.py:13)"),
            std::string::npos)
      << groups.dump();
  EXPECT_NE(groups[1]["stack"].get<std::string>().find("[py] load_batch (train.py:5) < [py] train (train.py:12)"),
            std::string::npos)
      << groups.dump();
  EXPECT_NE(inc["stacks"]["why"].get<std::string>().find(
                "in Python the outliers are at load_batch (train.py:5) via train (train.py:12), the others at "
                "all_reduce_grads (train.py:7) via train (train.py:13)"),
            std::string::npos)
      << inc.dump();
  std::printf("[ python ] %s: %s\n", interpreter.c_str(), inc["stacks"]["why"].get<std::string>().c_str());
  for (const json& g : groups) std::printf("[ python ]   %s: %s\n", g["ranks"].dump().c_str(), g["stack"].get<std::string>().c_str());
}

TEST_F(Ecosystem, APythonRankAtAnotherCallSiteIsSingledOutByItsPythonFrames) {
  PythonCallSitesSingleOutTheOutlier(testing::FindPython(11, false));
}

TEST_F(Ecosystem, APythonRankAtAnotherCallSiteIsSingledOutWithASharedLibraryPython) {
  PythonCallSitesSingleOutTheOutlier(testing::FindPython(11, true));
}

// `bulwark run`: up, submit, follow, down in one command. The job is a
// script that keeps its own checkpoint (a file per rank) and ends with 0
// after step `last` (0: never).
class BulwarkRun : public Ecosystem {
 protected:
  std::unique_ptr<testing::Process> StartRun(int last) {
    const std::string script = root_ + "/train.sh";
    std::ofstream(script) << "#!/bin/bash\n"
                          << "ckpt=" << root_ << "/ckpt-$RANK\n"
                          << "start=$(cat $ckpt 2>/dev/null || echo 0)\n"
                          << "for ((i = start + 1; " << (last > 0 ? "i <= " + std::to_string(last) : "") << "; i++)); do\n"
                          << "  echo \"step $i loss 2.$((i % 10))\"; echo $i > $ckpt; sleep 0.2\n"
                          << "done\n";
    ::chmod(script.c_str(), 0755);
    return std::make_unique<testing::Process>(std::vector<std::string>{
        testing::BinDir() + "/bulwark", "run", "--machines", "2", "--standby", "1", "--dir", dir_, "--progress",
        "step (?P<step>\\d+) loss (?P<loss>[0-9.]+)", "--", script});
  }
  // `bulwark run --dir DIR ARGS`: the fixture's Bulwark() appends --dir,
  // which after "--" would be the job's.
  testing::ProcessResult RunCmd(std::vector<std::string> args, double timeout_s = 120) {
    args.insert(args.begin(), {testing::BinDir() + "/bulwark", "run", "--dir", dir_});
    return testing::Run(args, {}, timeout_s);
  }
  // Processes whose command line names this test's directory: the
  // controller, the agents and the ranks (none once the run is over).
  std::vector<pid_t> Leftovers() {
    std::vector<pid_t> out;
    for (const auto& e : std::filesystem::directory_iterator("/proc")) {
      const std::string name = e.path().filename();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream in(e.path() / "cmdline");
      std::string cmd((std::istreambuf_iterator<char>(in)), {});
      if (cmd.find(root_) != std::string::npos && std::atoi(name.c_str()) != ::getpid()) out.push_back(std::atoi(name.c_str()));
    }
    return out;
  }
};

TEST_F(BulwarkRun, FollowsAJobThroughAKillToItsEndAndLeavesNothingBehind) {
  auto run = StartRun(40);
  WaitFor("steps", 60, [](const json& s) { return s["job"]["last_step"] >= 5; });
  auto r = Bulwark({"inject", "kill", "--machine", "m01"});  // from "another terminal"
  ASSERT_EQ(r.exit_code, 0) << r.err;
  testing::ProcessResult res = run->Wait(120);
  EXPECT_EQ(res.exit_code, 0) << res.out << res.err;
  EXPECT_NE(res.out.find("running job run on 2 machine(s)"), std::string::npos) << res.out;
  EXPECT_NE(res.out.find("incident 1 ("), std::string::npos) << "the kill's incident is printed:\n" << res.out;
  EXPECT_NE(res.out.find("job run completed at step 40 (every rank of generation 2 exited 0) after "), std::string::npos)
      << res.out;
  EXPECT_NE(res.out.find(": 1 incident(s), ETTR "), std::string::npos) << res.out;
  EXPECT_TRUE(Leftovers().empty()) << res.out;
}

TEST_F(BulwarkRun, CtrlCBringsTheClusterDownAndLeavesNoProcessBehind) {
  auto run = StartRun(0);
  WaitFor("steps", 60, [](const json& s) { return s["job"]["last_step"] >= 3; });
  ASSERT_FALSE(Leftovers().empty());
  ::kill(run->pid(), SIGINT);
  testing::ProcessResult res = run->Wait(60);
  EXPECT_EQ(res.exit_code, 130) << res.out << res.err;
  EXPECT_NE(res.out.find("interrupted: the cluster is brought down mid-job"), std::string::npos) << res.out;
  EXPECT_TRUE(Leftovers().empty()) << res.out;
}

// A script with a bug after its first step fails there in every
// generation, each after redoing that step: the job's, not a machine's.
// It was taken for each machine's repeat crash: both machines were evicted
// (drained, on Slurm) and run waited for machines until it was stopped.
TEST_F(BulwarkRun, AScriptThatFailsAtTheSameStepEveryTimeIsStoppedAndNothingIsEvicted) {
  const std::string script = root_ + "/bug.sh";
  std::ofstream(script) << "#!/bin/bash\necho \"step 1 loss 2.0\"; sleep 0.3\necho 'ValueError: bad batch' >&2; exit 1\n";
  ::chmod(script.c_str(), 0755);
  auto res = RunCmd({"--machines", "2", "--standby", "1", "--progress", "step (?P<step>\\d+) loss (?P<loss>[0-9.]+)",
                     "--", script}, 180);
  EXPECT_EQ(res.exit_code, 1) << res.out << res.err;
  EXPECT_NE(res.out.find("job run stopped by the controller"), std::string::npos) << res.out;
  for (const char* eviction : {"evicted m0", "evicted_and_replaced"}) {
    EXPECT_EQ(res.out.find(eviction), std::string::npos) << "a healthy machine was evicted:\n" << res.out;
  }
  EXPECT_TRUE(Leftovers().empty()) << res.out;
}

TEST_F(BulwarkRun, AClusterAlreadyRunningThereIsLeftAlone) {
  auto up = Bulwark({"up", "--machines", "1"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  auto run = RunCmd({"--machines", "1", "--", "/bin/true"});
  EXPECT_EQ(run.exit_code, 2) << run.out << run.err;
  EXPECT_NE(run.err.find("a cluster already runs in " + dir_), std::string::npos) << run.err;
  EXPECT_EQ(Bulwark({"status"}).exit_code, 0) << "the running cluster was brought down";
}

TEST_F(BulwarkRun, JsonPrintsOneSummaryAndACommandIsRequired) {
  auto none = RunCmd({"--machines", "2"});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("run: no command"), std::string::npos) << none.err;
  auto stray = Bulwark({"status", "--", "ls"});
  EXPECT_NE(stray.err.find("only 'run' takes one"), std::string::npos) << stray.err;
  const std::string script = root_ + "/short.sh";
  std::ofstream(script) << "#!/bin/bash\nfor i in 1 2 3; do echo \"step $i loss 1.0\"; sleep 0.1; done\n";
  ::chmod(script.c_str(), 0755);
  auto res = RunCmd({"--machines", "1", "--json", "--progress", "step (?P<step>\\d+)", "--", script});
  EXPECT_EQ(res.exit_code, 0) << res.out << res.err;
  json j = json::parse(res.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << res.out;
  EXPECT_EQ(j["exit_code"], 0);
  EXPECT_EQ(j["job"]["state"], "completed");
  EXPECT_EQ(j["job"]["done_step"], 3);
}

TEST_F(Ecosystem, MetricsAreServedWhereStatusSaysAndPassPromtool) {
  // No port given: the controller binds one the kernel picks (no guessed
  // free port another process could take first) and says where.
  UpAndSubmit({});
  json s = WaitFor("steps", 30, [](const json& s) { return s["job"]["last_step"] >= 5; });
  ASSERT_TRUE(s["metrics"].is_string()) << s.dump();
  const std::string url = s["metrics"];
  const std::string prefix = "http://127.0.0.1:";
  ASSERT_EQ(url.rfind(prefix, 0), 0u) << url;
  const int port = std::atoi(url.c_str() + prefix.size());
  ASSERT_GT(port, 0) << url;
  EXPECT_EQ(url, prefix + std::to_string(port) + "/metrics");
  std::ifstream recorded(dir_ + "/controller.metrics");
  std::string line;
  std::getline(recorded, line);
  EXPECT_EQ(line, url);
  EXPECT_NE(Bulwark({"status"}).out.find("metrics at " + url), std::string::npos);
  // The file_sd target list Prometheus can follow, beside it.
  std::ifstream sd(dir_ + "/controller.metrics.json");
  json targets = json::parse(std::string((std::istreambuf_iterator<char>(sd)), {}), nullptr, false);
  ASSERT_TRUE(targets.is_array()) << targets.dump();
  EXPECT_EQ(targets[0]["targets"][0], "127.0.0.1:" + std::to_string(port)) << targets.dump();

  httplib::Client c("127.0.0.1", port);
  auto res = c.Get("/metrics");
  ASSERT_TRUE(res) << "no answer from " << url;
  ASSERT_EQ(res->status, 200);
  const std::string path = root_ + "/metrics.txt";
  std::ofstream(path) << res->body;
  auto check = testing::Run({"/bin/sh", "-c", "promtool check metrics < " + path}, {}, 30);
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(res->body, m, std::regex("\nbulwark_job_step\\{job=\"script\"\\} (\\d+)"))) << res->body;
  EXPECT_GE(std::stoi(m[1]), 5);
  EXPECT_NE(res->body.find("bulwark_machine_heartbeat_age_seconds{machine=\"m03\"}"), std::string::npos);
  EXPECT_NE(res->body.find("bulwark_standby_available 1"), std::string::npos) << res->body;
}

// Each agent's own /metrics (agent/agent_metrics.h): where its machine
// directory says, valid for promtool, listing its ranks, and counting a rank
// killed under it as an exit and a restart.
TEST_F(Ecosystem, EachAgentServesItsOwnMetricsWhereItsMachineDirSays) {
  UpAndSubmit({});
  WaitFor("steps", 30, [](const json& s) { return s["job"]["last_step"] >= 5; });
  auto scrape = [&](const std::string& machine) {
    std::ifstream recorded(dir_ + "/machines/" + machine + "/agent.metrics");
    std::string url;
    std::getline(recorded, url);
    const std::string prefix = "http://127.0.0.1:";
    EXPECT_EQ(url.rfind(prefix, 0), 0u) << machine << ": " << url;
    httplib::Client c("127.0.0.1", std::atoi(url.c_str() + prefix.size()));
    auto res = c.Get("/metrics");
    EXPECT_TRUE(res) << "no answer from " << url;
    return res && res->status == 200 ? res->body : std::string();
  };
  std::string total;
  for (const char* m : {"m01", "m02", "m03"}) {
    const std::string body = scrape(m);
    ASSERT_FALSE(body.empty()) << m;
    const std::string path = root_ + "/agent-" + m + ".txt";
    std::ofstream(path) << body;
    auto check = testing::Run({"/bin/sh", "-c", "promtool check metrics < " + path}, {}, 30);
    EXPECT_EQ(check.exit_code, 0) << m << ": " << check.out << check.err;
    // The file_sd list beside it names the same port and the machine.
    std::ifstream sd(dir_ + "/metrics.d/agent-" + m + ".json");
    json targets = json::parse(std::string((std::istreambuf_iterator<char>(sd)), {}), nullptr, false);
    ASSERT_TRUE(targets.is_array()) << m;
    EXPECT_EQ(targets[0]["labels"]["machine"], m) << targets.dump();
    total += body;
  }
  // Two ranks on two machines, the standby runs none.
  EXPECT_NE(total.find("bulwark_agent_rank_up{rank=\"0\"} 1"), std::string::npos) << total;
  EXPECT_NE(total.find("bulwark_agent_rank_up{rank=\"1\"} 1"), std::string::npos) << total;
  std::smatch step;
  ASSERT_TRUE(std::regex_search(total, step, std::regex("\nbulwark_agent_job_step ([1-9]\\d*)"))) << total;
  EXPECT_TRUE(scrape("m03").find("\nbulwark_agent_live_ranks 0\n") != std::string::npos);

  // Kill rank 1 where it runs: its agent counts the exit and, once the
  // controller restarts the job, the new process.
  const std::string where = scrape("m01").find("rank_up{rank=\"1\"}") != std::string::npos ? "m01" : "m02";
  auto r = Bulwark({"inject", "kill", "--machine", where, "--rank", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  WaitFor("the restart", 30, [](const json& s) { return s["job"]["generation"] >= 2 && s["job"]["state"] == "running"; });
  std::string after;
  for (int i = 0; i < 50; ++i) {
    after = scrape(where);
    if (after.find("bulwark_agent_rank_restarts_total{rank=\"1\"} 1") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_NE(after.find("bulwark_agent_rank_exits_total{rank=\"1\",how=\"signal\"} 1"), std::string::npos) << after;
  EXPECT_NE(after.find("bulwark_agent_rank_restarts_total{rank=\"1\"} 1"), std::string::npos) << after;
}

}  // namespace
}  // namespace bulwark
