// Two jobs on one fleet (plane/fleet.h, issue 36 item 3): 4 machines and 1
// standby of one local cluster, `bulwark submit --job a` and `--job b`, two
// machines each. A kill in job a restarts a alone: b's ranks keep their
// processes and keep stepping. A machine-down in job b gives b the pool's
// standby: a is not touched. The controller SIGKILLed in the middle replays
// both. Both runs end bitwise on the fault-free run.
#include <signal.h>

#include <chrono>
#include <fstream>
#include <map>
#include <string>
#include <thread>

#include "support/cluster_fixture.h"

namespace bulwark {
namespace {

class Fleet : public Cluster {
 protected:
  std::vector<std::string> TrainerArgs(int steps = kSteps) const {
    return {"--config", "tiny", "--data", *data_, "--steps", std::to_string(steps), "--log-format", "json",
            "--threads", "1", "--dist-timeout", "10", "--eval-every", "0"};
  }
  void WriteJobFile(const std::string& name, int world_size = 2, int steps = kSteps) {
    std::ofstream job(root_ + "/" + name + ".yaml");
    job << "name: " << name << "\nworld_size: " << world_size << "\ncheckpoint: {persist_every: 10}\nargs: [";
    for (const std::string& a : TrainerArgs(steps)) job << "'" << a << "', ";
    job << "--memory-ckpt, 'on', --step-checksum]\nenv: {OMP_NUM_THREADS: '1'}\n";
  }
  // Job `name`'s entry of status --json.
  static json JobOf(const json& s, const std::string& name) {
    for (const json& j : s.value("jobs", json::array())) {
      if (j.value("name", "") == name) return j;
    }
    return json();
  }
  static constexpr const char* kRankLogs[] = {"rank-0.log", "rank-1.log", "rank-2.log"};
  // Every process that took a rank on `machine` ("adopt" lines of its rank logs).
  std::vector<int64_t> Adopted(const std::string& machine) {
    std::vector<int64_t> pids;
    for (const char* r : kRankLogs) {
      for (const json& e : Events(RankLog(machine, r), "adopt")) pids.push_back(e["pid"]);
    }
    return pids;
  }
  static bool Alive(int64_t pid) { return ::kill(static_cast<pid_t>(pid), 0) == 0; }
  // Alive, or gone because its job finished (a "done" line on the
  // machine): under load a job can reach its last step while the other
  // recovers, and its ranks then exit 0 (a clean clone's suite saw all of
  // job b's ranks done at step 400 before this was read).
  bool AliveOrFinished(const std::string& machine, int64_t pid) {
    if (Alive(pid)) return true;
    for (const char* r : kRankLogs) {
      if (!Events(RankLog(machine, r), "done").empty()) return true;
    }
    return false;
  }
  // The controller SIGKILLed and started again on its journal.
  void KillAndRestartController() {
    pid_t controller = 0;
    std::ifstream(dir_ + "/controller.pid") >> controller;
    ASSERT_GT(controller, 0);
    ::kill(controller, SIGKILL);
    ASSERT_TRUE(Dead(controller, 10));
    StartController("");
  }
  // The checksum a rank on one of `machines` printed at `step`.
  std::string ChecksumOn(const std::vector<std::string>& machines, int64_t step) {
    for (const std::string& m : machines) {
      for (const char* r : kRankLogs) {
        for (const char* kind : {"step", "checksum"}) {
          for (const json& e : Events(RankLog(m, r), kind)) {
            if (e.value("step", int64_t{-1}) == step && e.contains("checksum")) return e["checksum"];
          }
        }
      }
    }
    return "";
  }
  static constexpr int kSteps = 400;
};

TEST_F(Fleet, TwoJobsShareOnePoolAndNeitherFeelsTheOthersFaults) {
  auto up = Bulwark({"up", "--machines", "4", "--standby", "1"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  WriteJobFile("a");
  WriteJobFile("b");
  auto sub = Bulwark({"submit", "--job", "a", root_ + "/a.yaml"});
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  sub = Bulwark({"submit", "--job", "b", root_ + "/b.yaml"});
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  json s = WaitFor("both jobs stepping", 90, [](const json& j) {
    return JobOf(j, "a").value("last_step", 0) >= 20 && JobOf(j, "b").value("last_step", 0) >= 20;
  });
  ASSERT_EQ(JobOf(s, "a")["placement"], json({"m01", "m02"})) << s.dump();
  ASSERT_EQ(JobOf(s, "b")["placement"], json({"m03", "m04"})) << s.dump();
  EXPECT_EQ(s["job"]["name"], "a") << "the `job` key scripts read stays the first job's";

  // A rank of job a killed: a restarts in place; b's processes go on.
  const std::vector<int64_t> b_pids = Adopted("m03"), b_pids4 = Adopted("m04");
  ASSERT_EQ(b_pids.size(), 1u);
  ASSERT_EQ(b_pids4.size(), 1u);
  Inject("kill", "m01");
  s = WaitFor("job a's reattempt", 60, [](const json& j) {
    const json a = JobOf(j, "a");
    return a["generation"] == 2 && a["state"] == "running" && a["incidents"] == 1;
  });
  const int64_t b_step = JobOf(s, "b")["last_step"];
  s = WaitFor("job b stepping on", 60, [&](const json& j) { return JobOf(j, "b")["last_step"] >= b_step + 20; });
  EXPECT_EQ(JobOf(s, "b")["generation"], 1) << s.dump();
  EXPECT_EQ(JobOf(s, "b")["incidents"], 0) << s.dump();
  EXPECT_EQ(Adopted("m03"), b_pids) << "b's rank on m03 kept its process";
  EXPECT_EQ(Adopted("m04"), b_pids4) << "b's rank on m04 kept its process";
  EXPECT_TRUE(Alive(b_pids[0]) && Alive(b_pids4[0]));

  // A machine of job b lost: the fleet's pool gives b its standby; a goes on.
  const std::vector<int64_t> a_pids = Adopted("m02");
  Inject("machine-down", "m03");
  s = WaitFor("job b on the pool's machine", 60, [](const json& j) {
    const json b = JobOf(j, "b");
    return b["placement"] == json({"m05", "m04"}) && b["state"] == "running" && b["incidents"] == 1;
  });
  EXPECT_EQ(JobOf(s, "a")["generation"], 2) << s.dump();
  EXPECT_EQ(JobOf(s, "a")["incidents"], 1) << s.dump();
  EXPECT_EQ(Adopted("m02"), a_pids) << "a's rank on m02 kept its process";

  // The controller SIGKILLed: it replays both jobs.
  ASSERT_NO_FATAL_FAILURE(KillAndRestartController());
  s = WaitFor("both jobs replayed", 30, [](const json& j) {
    return JobOf(j, "a")["generation"] == 2 && JobOf(j, "b")["generation"] == 2;
  });
  EXPECT_EQ(JobOf(s, "a")["incidents"], 1) << s.dump();
  EXPECT_EQ(JobOf(s, "b")["incidents"], 1) << s.dump();
  // Each job's one incident, its own.
  for (const char* job : {"a", "b"}) {
    testing::ProcessResult r = Bulwark({"incidents", "--job", job, "--json"}, 10);
    const json inc = json::parse(r.out, nullptr, false);
    ASSERT_TRUE(inc.is_array() && inc.size() == 1u) << job << ": " << r.out << r.err;
    std::printf("[ timing ] job %s: %s: detect %.3f s, recover %.3f s\n", job,
                inc[0]["summary"].get<std::string>().c_str(), inc[0].value("detect_s", -1.0),
                inc[0].value("recover_s", -1.0));
  }

  WaitFor("both ends", 400, [](const json& j) {
    return JobOf(j, "a").value("done_step", json()) == kSteps && JobOf(j, "b").value("done_step", json()) == kSteps;
  });
  std::vector<std::string> args = TrainerArgs();
  const std::string reference = ReferenceChecksum(args, 2);
  ASSERT_FALSE(reference.empty());
  EXPECT_EQ(ChecksumOn({"m01", "m02"}, kSteps), reference) << "job a";
  EXPECT_EQ(ChecksumOn({"m05", "m04"}, kSteps), reference) << "job b";
}

// Issue 36's cluster test: 2 jobs of 3 machines on 6 machines + 2 standbys.
// A kill in job a and a machine-down in job b at the same moment: each job
// restarts once, for its own fault, and the pool's first standby goes to b,
// the one that asked. Then a machine of a goes down and the controller is
// SIGKILLed before it has decided: the restarted controller replays both
// jobs and gives a the second standby, so the standbys went in incident
// order, and b's ranks keep their processes. Both end bitwise.
TEST_F(Fleet, FaultsInBothJobsAtOnceStayInTheirJobsAndTheStandbysGoInIncidentOrder) {
  auto up = Bulwark({"up", "--machines", "6", "--standby", "2"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  WriteJobFile("a", 3);
  WriteJobFile("b", 3);
  for (const char* job : {"a", "b"}) {
    auto sub = Bulwark({"submit", "--job", job, root_ + "/" + job + ".yaml"});
    ASSERT_EQ(sub.exit_code, 0) << sub.err;
  }
  json s = WaitFor("both jobs stepping", 120, [](const json& j) {
    return JobOf(j, "a").value("last_step", 0) >= 20 && JobOf(j, "b").value("last_step", 0) >= 20;
  });
  ASSERT_EQ(JobOf(s, "a")["placement"], json({"m01", "m02", "m03"})) << s.dump();
  ASSERT_EQ(JobOf(s, "b")["placement"], json({"m04", "m05", "m06"})) << s.dump();

  // At once: a's rank on m01 killed, b's m05 down.
  Inject("machine-down", "m05");
  Inject("kill", "m01");
  s = WaitFor("each job restarted for its own fault", 90, [](const json& j) {
    const json a = JobOf(j, "a"), b = JobOf(j, "b");
    return a["generation"] == 2 && a["state"] == "running" && b["generation"] == 2 && b["state"] == "running" &&
           b["placement"] == json({"m04", "m07", "m06"});
  });
  EXPECT_EQ(JobOf(s, "a")["placement"], json({"m01", "m02", "m03"})) << "a kill restarts a in place";
  // One process per generation on every machine: neither job restarted
  // again for the other's fault (a's ranks are a's, b's are b's).
  for (const char* m : {"m01", "m02", "m03", "m04", "m06"}) EXPECT_EQ(Adopted(m).size(), 2u) << m;
  EXPECT_EQ(Adopted("m07").size(), 1u);
  std::map<std::string, std::vector<int64_t>> pids;
  for (const char* m : {"m01", "m02", "m03", "m04", "m06", "m07"}) pids[m] = Adopted(m);
  const int64_t a_step = JobOf(s, "a")["last_step"], b_step = JobOf(s, "b")["last_step"];
  s = WaitFor("both stepping on", 90, [&](const json& j) {
    return JobOf(j, "a")["last_step"] >= a_step + 10 && JobOf(j, "b")["last_step"] >= b_step + 10;
  });
  for (const auto& [m, p] : pids) EXPECT_EQ(Adopted(m), p) << m << " restarted after both recovered";
  EXPECT_EQ(JobOf(s, "a")["incidents"], 1) << s.dump();
  EXPECT_EQ(JobOf(s, "b")["incidents"], 1) << s.dump();

  // m02 (a) down; the controller SIGKILLed once its rank is gone, before
  // the lease could call m02 lost.
  const int64_t m02_rank = pids["m02"].back();
  Inject("machine-down", "m02");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (Alive(m02_rank) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_FALSE(Alive(m02_rank)) << "m02's rank outlived its machine";
  ASSERT_NO_FATAL_FAILURE(KillAndRestartController());
  s = WaitFor("a on the second standby, b replayed as it was", 120, [](const json& j) {
    const json a = JobOf(j, "a");
    return a["placement"] == json({"m01", "m08", "m03"}) && a["state"] == "running" && a["incidents"] == 2 &&
           JobOf(j, "b")["generation"] == 2;
  });
  EXPECT_EQ(JobOf(s, "b")["incidents"], 1) << s.dump();
  EXPECT_EQ(JobOf(s, "b")["placement"], json({"m04", "m07", "m06"})) << s.dump();
  for (const char* m : {"m04", "m06", "m07"}) {
    EXPECT_EQ(Adopted(m), pids[m]) << "b's rank on " << m << " kept its process";
    EXPECT_TRUE(AliveOrFinished(m, pids[m].back())) << m << "'s rank died before its job finished";
  }
  // The standbys went in incident order: m07 to b, whose incident came
  // first, m08 to a.
  std::map<std::string, json> incidents;
  for (const char* job : {"a", "b"}) {
    testing::ProcessResult r = Bulwark({"incidents", "--job", job, "--json"}, 10);
    incidents[job] = json::parse(r.out, nullptr, false);
    ASSERT_TRUE(incidents[job].is_array()) << job << ": " << r.out << r.err;
    for (const json& i : incidents[job]) {
      std::printf("[ timing ] job %s: %s: detect at %lld ms, recover %.3f s\n", job,
                  i["summary"].get<std::string>().c_str(), static_cast<long long>(i.value("detected_ms", int64_t{0})),
                  i.value("recover_s", -1.0));
    }
  }
  ASSERT_EQ(incidents["a"].size(), 2u);
  ASSERT_EQ(incidents["b"].size(), 1u);
  EXPECT_LT(incidents["b"][0]["detected_ms"].get<int64_t>(), incidents["a"][1]["detected_ms"].get<int64_t>());

  WaitFor("both ends", 600, [](const json& j) {
    return JobOf(j, "a").value("done_step", json()) == kSteps && JobOf(j, "b").value("done_step", json()) == kSteps;
  });
  const std::string reference = ReferenceChecksum(TrainerArgs(), 3);
  ASSERT_FALSE(reference.empty());
  EXPECT_EQ(ChecksumOn({"m01", "m08", "m03"}, kSteps), reference) << "job a";
  EXPECT_EQ(ChecksumOn({"m04", "m07", "m06"}, kSteps), reference) << "job b";
}

// Two named jobs under `up --ha` (their journals in etcd, plane/job_journals.h):
// the leading controller SIGKILLed, the other leads within the lease plus
// a margin, and both jobs train on in their generation with no incident; a
// rank of job b killed right after is the new leader's incident, b's alone,
// and both train on.
TEST_F(Fleet, UnderHaBothJobsOutliveTheLeadersLossAndTheNextLeaderHandlesTheirFaults) {
  auto up = Bulwark({"up", "--ha", "--machines", "4", "--standby", "1"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  // Jobs that never end by themselves: both must still train when b's rank
  // is killed, after the lease's 5 s and more of failover. That a fleet's
  // jobs end bitwise through a controller's loss is the other tests' (and
  // HaCluster's, for one job): here the failover alone.
  constexpr int kHaSteps = 1000000;
  WriteJobFile("a", 2, kHaSteps);
  WriteJobFile("b", 2, kHaSteps);
  for (const char* job : {"a", "b"}) {
    auto sub = Bulwark({"submit", "--job", job, root_ + "/" + job + ".yaml"});
    ASSERT_EQ(sub.exit_code, 0) << sub.err;
  }
  json s = WaitFor("both jobs stepping under c1", 120, [](const json& j) {
    return JobOf(j, "a").value("last_step", 0) >= 20 && JobOf(j, "b").value("last_step", 0) >= 20;
  });
  ASSERT_EQ(s.value("leader", json()), "c1") << s.dump();
  pid_t c1 = 0;
  std::ifstream(dir_ + "/controllers/c1/controller.pid") >> c1;
  ASSERT_GT(c1, 0);

  ::kill(c1, SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  s = WaitFor("c2 leading", 5 + 5, [](const json& j) { return j.value("leader", json()) == "c2"; });
  std::printf("[ timing ] c2 led %.2f s after c1's SIGKILL (5 s lease), with 2 named jobs\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count());
  const int64_t a_step = JobOf(s, "a").value("last_step", 0), b_step = JobOf(s, "b").value("last_step", 0);
  s = WaitFor("both jobs stepping under c2", 60, [&](const json& j) {
    return JobOf(j, "a").value("last_step", 0) > a_step + 10 && JobOf(j, "b").value("last_step", 0) > b_step + 10;
  });
  for (const char* job : {"a", "b"}) {
    EXPECT_EQ(JobOf(s, job)["generation"], 1) << job << " trained through the failover: " << s.dump();
    EXPECT_EQ(JobOf(s, job)["incidents"], 0) << job << ": " << s.dump();
  }

  Inject("kill", "m03");
  s = WaitFor("c2's reattempt of b", 60, [](const json& j) {
    const json b = JobOf(j, "b");
    return b["generation"] == 2 && b["state"] == "running" && b["incidents"] == 1;
  });
  testing::ProcessResult r = Bulwark({"incidents", "--job", "b", "--json"}, 10);
  const json inc = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(inc.is_array() && inc.size() == 1u) << r.out << r.err;
  std::printf("[ timing ] job b under c2: %s: detect %.3f s, recover %.3f s\n", inc[0]["summary"].get<std::string>().c_str(),
              inc[0].value("detect_s", -1.0), inc[0].value("recover_s", -1.0));
  EXPECT_EQ(JobOf(s, "a")["generation"], 1) << "a is not touched by b's fault: " << s.dump();
  EXPECT_EQ(JobOf(s, "a")["incidents"], 0) << s.dump();
  const int64_t a_after = JobOf(s, "a").value("last_step", 0), b_after = JobOf(s, "b").value("last_step", 0);
  s = WaitFor("both jobs stepping on under c2", 60, [&](const json& j) {
    return JobOf(j, "a").value("last_step", 0) > a_after + 10 && JobOf(j, "b").value("last_step", 0) > b_after + 10;
  });
  EXPECT_EQ(JobOf(s, "a")["generation"], 1) << s.dump();
}

// update, rollback and releases take --job (issue 36 item 3): job b's
// release is b's alone, named for b whatever its file says; job a keeps its
// one release. The ranks only sleep, so no restart applies a release (one
// waits for a running job): release 2 is pending until the rollback to 1.
TEST_F(Fleet, UpdateAndRollbackAreForTheJobNamed) {
  auto up = Bulwark({"up", "--machines", "2"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  for (const std::string name : {"a", "b"}) {
    std::ofstream(root_ + "/" + name + ".yaml") << "name: " << name << "\nworld_size: 1\ncommand: [sleep, '600']\n";
    auto sub = Bulwark({"submit", "--job", name, root_ + "/" + name + ".yaml"});
    ASSERT_EQ(sub.exit_code, 0) << sub.err;
  }
  auto releases = [&](const std::string& job) {
    auto r = Bulwark({"releases", "--job", job, "--json"}, 10);
    json j = r.exit_code == 0 ? json::parse(r.out, nullptr, false) : json();
    return j.is_object() ? j : json::object();
  };
  std::ofstream(root_ + "/next.yaml") << "name: next\nworld_size: 1\ncommand: [sleep, '601']\n";
  auto r = Bulwark({"update", "--job", "b", "--why", "b only", root_ + "/next.yaml"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("release 2 of job b"), std::string::npos) << r.out;
  json b = releases("b");
  EXPECT_EQ(b.value("pending", 0), 2) << b.dump();
  ASSERT_EQ(b.value("releases", json::array()).size(), 2u) << b.dump();
  EXPECT_EQ(b["releases"][1].value("why", ""), "b only") << b.dump();
  r = Bulwark({"rollback", "--job", "b", "--to", "1", "--why", "back"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  b = releases("b");
  EXPECT_EQ(b.value("pending", -1), 0) << "b stays on release 1, release 2 no longer pending: " << b.dump();
  EXPECT_EQ(b.value("applied", 0), 1) << b.dump();
  const json a = releases("a");
  EXPECT_EQ(a.value("pending", -1), 0) << a.dump();
  EXPECT_EQ(a.value("releases", json::array()).size(), 1u) << a.dump();
  r = Bulwark({"rollback", "--job", "c"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("no job 'c'"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace bulwark
