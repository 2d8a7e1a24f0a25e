// A fault right after an elastic job changes membership (issue 42): the
// job narrows (a device fails, no standby) and grows back (the machine is
// returned), or a standby takes the failed machine's slot, and within about
// a second of the change m01 freezes, is killed or goes down. The survivors must restore from their live state (or
// a peer's), never from durable storage, losing at most one step, and the
// run ends bitwise where the fault-free run ends.
//
// A frozen machine is the hard one: its ranks send neither data nor EOF, so
// the survivors sit in a ring collective with it. Before the fix their agents,
// tired of waiting for the yield, stopped them and their state with them; the
// new width could use no in-memory copy of the old one, and the job went
// back to its last persisted step (52 steps in the run).
// Every wait polls status or the incidents; no fixed sleeps.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "support/cluster_fixture.h"
#include "support/process.h"

namespace bulwark {
namespace {

enum class After { kNarrowing, kGrow, kStandby };
struct Case {
  std::string fault;  // freeze | kill | machine-down, of m01
  After after;        // the change the fault follows
};
const char* Name(After a) {
  return a == After::kGrow ? "grow" : a == After::kStandby ? "standby" : "narrowing";
}
void PrintTo(const Case& c, std::ostream* os) { *os << c.fault << " after the " << Name(c.after); }

class ElasticGrow : public Cluster, public ::testing::WithParamInterface<Case> {
 protected:
  static constexpr int kSteps = 320;
  static constexpr int kReplicas = 3;
  static std::vector<std::string> TrainerArgs() {
    return {"--config", "tiny", "--data", *data_, "--steps", std::to_string(kSteps), "--log-format", "json",
            "--threads", "1", "--dist-timeout", "10", "--eval-every", "0", "--precision", "fp32",
            "--elastic-replicas", std::to_string(kReplicas), "--micro-batches", "2"};
  }
  // The fault-free run's checksum, once per bulwark-train binary: under
  // ctest each case is a process of its own, and the reference run costs
  // about what a case does. Keyed by the binary's mtime and size, so a
  // rebuilt trainer is run afresh.
  static const std::string& Reference() {
    static const std::string sum = [] {
      struct stat bin {};
      ::stat((testing::BinDir() + "/bulwark-train").c_str(), &bin);
      const std::string path = testing::BinDir() + "/../test-data/elastic-grow-reference-" + std::to_string(kSteps) +
                               "-" + std::to_string(bin.st_mtime) + "-" + std::to_string(bin.st_size);
      const int lock = ::open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      if (lock >= 0) ::flock(lock, LOCK_EX);  // a case waits for another computing it
      std::string got = ReadAll(path);
      if (got.empty()) {
        got = ReferenceChecksum(TrainerArgs(), kReplicas);
        if (!got.empty()) std::ofstream(path + ".tmp") << got;
        std::rename((path + ".tmp").c_str(), path.c_str());
      }
      if (lock >= 0) ::close(lock);
      return got;
    }();
    return sum;
  }
  void SubmitJob() {
    std::ofstream job(root_ + "/job.yaml");
    // persist_every as in the issue: a fallback to durable storage shows.
    job << "name: elastic\nworld_size: " << kReplicas
        << "\nrecovery: {mode: elastic}\ncheckpoint: {persist_every: 40}\nargs: [";
    for (const std::string& a : TrainerArgs()) job << "'" << a << "', ";
    job << "--memory-ckpt, 'on']\nenv: {OMP_NUM_THREADS: '1'}\n";
    job.close();
    auto sub = Bulwark({"submit", root_ + "/job.yaml"});
    ASSERT_EQ(sub.exit_code, 0) << sub.err;
  }
  // The first status of a generation after `gen` that runs on `placement`
  // and has completed a step past `step`.
  json Reached(const std::string& what, int64_t gen, int64_t step, const json& placement) {
    return WaitFor(what, 90, [&](const json& x) {
      return x["job"]["generation"] > gen && x["job"]["state"] == "running" && x["job"]["placement"] == placement &&
             x["job"]["last_step"] > step;
    });
  }
  void InjectFault(const std::string& fault) {
    if (fault != "freeze") return Inject(fault, "m01");
    inject_ms_ = NowMs();
    auto r = Bulwark({"inject", "freeze", "--machine", "m01", "--for", "6"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  // The grow was spliced in between steps (docs/recovery.md): m01's rank
  // took generation `grown` while it trained, with no yield and no wait for
  // its agent. Prints how long rank 0 stood between two steps across it.
  void ExpectSpliced(int64_t grown) {
    const std::string log = RankLog("m01", "rank-0.log");
    json adopt;
    WaitFor("m01's rank to take the grown generation", 60, [&](const json&) {
      for (const json& e : Events(log, "adopt")) {
        if (e["generation"] == grown) adopt = e;
      }
      return !adopt.is_null();
    });
    EXPECT_EQ(adopt.value("path", ""), "splice") << adopt.dump();
    WaitFor("a step after the splice", 60, [&](const json&) {
      const std::vector<json> steps = Events(log, "step");
      return !steps.empty() && steps.back()["wall_ms"] > adopt["wall_ms"];
    });
    json before, after;
    for (const json& e : Events(log, "step")) {
      if (e["wall_ms"] <= adopt["wall_ms"]) before = e;
      if (e["wall_ms"] > adopt["wall_ms"] && after.is_null()) after = e;
    }
    std::printf("[ timing ] spliced: rank 0's steps %lld -> %lld %.3f s apart; the first after the splice took "
                "%.3f s, the last before it %.3f s\n",
                static_cast<long long>(before["step"]), static_cast<long long>(after["step"]),
                (after["wall_ms"].get<int64_t>() - before["wall_ms"].get<int64_t>()) / 1000.0,
                after["step_ms"].get<double>() / 1000.0, before["step_ms"].get<double>() / 1000.0);
  }
  // The incident the fault opened, once it records its restore.
  json FaultIncident() {
    json found;
    WaitFor("the fault's incident to restore", 90, [&](const json&) {
      for (const json& i : Query("incidents")) {
        if (i.value("detected_ms", int64_t{0}) >= inject_ms_ && i.contains("restore_source")) {
          found = i;
          return true;
        }
      }
      return false;
    });
    return found;
  }
};

TEST_P(ElasticGrow, AFaultRightAfterAMembershipChangeRestoresFromLiveState) {
  const Case c = GetParam();
  ASSERT_FALSE(Reference().empty());
  const bool standby = c.after == After::kStandby;
  auto up = Bulwark({"up", "--machines", std::to_string(kReplicas), "--standby", standby ? "1" : "0"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  SubmitJob();
  json s = WaitFor("first steps", 90, [](const json& x) { return x["job"]["last_step"] >= 20; });

  // m03's device fails: m04, the standby, takes its slot, or with none
  // m01 and m02 train on.
  int64_t gen = s["job"]["generation"], at = s["job"]["last_step"];
  Inject("device-fail", "m03");
  s = Reached(standby ? "the standby in m03's slot" : "narrower", gen, at,
              standby ? json({"m01", "m02", "m04"}) : json({"m01", "m02"}));
  if (c.after == After::kGrow) {
    // Some steps at 2 of 3, then m03 is returned and the job grows back.
    s = Reached("steps at 2 of 3", gen, s["job"]["last_step"].get<int64_t>() + 10, json({"m01", "m02"}));
    gen = s["job"]["generation"];
    at = s["job"]["last_step"];
    auto ret = Bulwark({"machine", "return", "--machine", "m03"});
    ASSERT_EQ(ret.exit_code, 0) << ret.err;
    s = Reached("grown back", gen, at, json({"m01", "m02", "m03"}));
    ExpectSpliced(s["job"]["generation"]);
  }
  const int64_t changed_ms = NowMs();

  // Within about a second of the change: the fault.
  InjectFault(c.fault);
  std::printf("[ timing ] %s %.3f s after the %s was seen\n", c.fault.c_str(), (inject_ms_ - changed_ms) / 1000.0,
              Name(c.after));
  json inc = FaultIncident();
  Report(c.fault);
  const std::string source = inc.value("restore_source", "");
  EXPECT_TRUE(source.rfind("live", 0) == 0 || source == "memory" || source == "peer")
      << "the survivors' state, or a copy in memory; not durable storage: " << inc.dump();
  ASSERT_TRUE(inc.contains("lost_steps")) << inc.dump();
  EXPECT_LE(inc["lost_steps"].get<int64_t>(), 1) << inc.dump();

  // The run ends where the fault-free run ends, to the bit.
  s = WaitFor("job completed", 300, [](const json& x) { return x["job"]["state"] == "completed"; });
  const std::string first = s["job"]["placement"][0];
  std::vector<json> done = Events(RankLog(first, "rank-0.log"), "done");
  ASSERT_FALSE(done.empty()) << first;
  EXPECT_EQ(done.back()["step"], kSteps);
  EXPECT_EQ(done.back()["param_checksum"], Reference()) << "the run diverged from the fault-free one";
}

INSTANTIATE_TEST_SUITE_P(Faults, ElasticGrow,
                         ::testing::Values(Case{"freeze", After::kGrow}, Case{"kill", After::kGrow},
                                           Case{"machine-down", After::kGrow}, Case{"freeze", After::kNarrowing},
                                           Case{"kill", After::kNarrowing}, Case{"machine-down", After::kNarrowing},
                                           Case{"freeze", After::kStandby}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           std::string n = i.param.fault + "_after_" + Name(i.param.after);
                           for (char& ch : n) ch = ch == '-' ? '_' : ch;
                           return n;
                         });

}  // namespace
}  // namespace bulwark
