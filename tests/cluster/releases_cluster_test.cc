// Releases and the requeue baseline on a real local cluster: a hot update
// restarts the ranks in place on the same machines from their in-memory
// checkpoints with the new release's environment; a release whose ranks
// crash with a code error is rolled back on its own; a requeued job stops
// every rank, waits out its provisioning delay and restores from durable
// storage, with the steps that cost counted. Every wait polls status.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "support/cluster_fixture.h"
#include "support/process.h"

namespace bulwark {
namespace {

class Releases : public Cluster {
 protected:
  // The tiny job with in-memory checkpoints persisted every 10 steps; `env`
  // and `recovery` are YAML fragments, `command` replaces bulwark-train.
  std::string WriteJobFile(const std::string& name, const std::string& env, const std::string& recovery = "",
                           const std::string& command = "") {
    const std::string path = root_ + "/" + name;
    std::ofstream f(path);
    f << "name: tiny\nworld_size: 2\ncheckpoint: {persist_every: 10}\n" << recovery;
    if (!command.empty()) {
      f << "command: " << command << "\n";
    } else {
      f << "args: [--config, tiny, --data, " << *data_ << ", --steps, '1000000', --log-format, json, "
        << "--threads, '1', --dist-timeout, '10', --step-checksum, --memory-ckpt, 'on']\n";
    }
    f << "env: {OMP_NUM_THREADS: '1'" << env << "}\n";
    return path;
  }
  // The values of variable `name` among the live processes of `machine`
  // (ranks and the spares set up for them: a staged release's processes
  // learn their rank over the rank link, not from their environment), read
  // from /proc, sorted and joined by ','; "" when none runs.
  std::string MachineEnv(const std::string& machine, const std::string& name) {
    const std::string where = dir_ + "/machines/" + machine + "/";
    std::set<std::string> values;
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
      std::ifstream env(entry.path() / "environ");
      if (!env) continue;
      std::map<std::string, std::string> vars;
      std::string var;
      while (std::getline(env, var, '\0')) {
        const size_t eq = var.find('=');
        if (eq != std::string::npos) vars[var.substr(0, eq)] = var.substr(eq + 1);
      }
      if (vars["BULWARK_RANK_SOCKET"].rfind(where, 0) != 0) continue;
      std::ifstream stat(entry.path() / "stat");
      std::string pid, comm, state;
      stat >> pid >> comm >> state;
      if (state == "Z") continue;  // reaped soon: not live
      values.insert(vars[name]);
    }
    std::string out;
    for (const std::string& v : values) out += (out.empty() ? "" : ",") + v;
    return out;
  }
  json Incident(size_t index) {
    json inc;
    for (int i = 0; i < 20 && !(inc.is_array() && inc.size() > index); ++i) {
      if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(250));
      inc = Query("incidents");
    }
    EXPECT_TRUE(inc.is_array() && inc.size() > index) << inc.dump();
    return inc.is_array() && inc.size() > index ? inc[index] : json::object();
  }
  // Waits for a restart past `gen` that has run 5 steps.
  json Restarted(const std::string& what, int64_t gen, int64_t step) {
    return WaitFor(what, 90, [&](const json& x) {
      return x["job"]["generation"] > gen && x["job"]["state"] == "running" && x["job"]["last_step"] > step + 5;
    });
  }
};

TEST_F(Releases, HotUpdateRestartsInPlaceAndACrashingReleaseIsRolledBack) {
  ASSERT_EQ(Bulwark({"up", "--machines", "2", "--standby", "1"}).exit_code, 0);
  auto sub = Bulwark({"submit", WriteJobFile("job.yaml", ", RELEASE: one")});
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  json s = WaitFor("first steps", 60, [](const json& x) { return x["job"]["last_step"] >= 20; });
  EXPECT_EQ(MachineEnv("m01", "RELEASE"), "one");

  // Bad updates: refused in one line, the job untouched.
  std::ofstream(root_ + "/other.yaml") << "name: other\nworld_size: 2\n";
  auto wrong = Bulwark({"update", root_ + "/other.yaml", "--now"});
  EXPECT_NE(wrong.exit_code, 0);
  EXPECT_NE(wrong.err.find("this cluster runs 'tiny'"), std::string::npos) << wrong.err;
  std::ofstream(root_ + "/broken.yaml") << "name: tiny\nworld_size: [\n";
  auto broken = Bulwark({"update", root_ + "/broken.yaml"});
  EXPECT_NE(broken.exit_code, 0);
  EXPECT_NE(broken.err.find("not valid YAML"), std::string::npos) << broken.err;
  auto past = Bulwark({"rollback"});
  EXPECT_NE(past.exit_code, 0);
  EXPECT_NE(past.err.find("no earlier release"), std::string::npos) << past.err;
  EXPECT_EQ(Query("status")["job"]["generation"], s["job"]["generation"]);

  // 1. Hot update, now: same machines, new environment, at most one step lost, bitwise.
  int64_t gen = Query("status")["job"]["generation"];
  inject_ms_ = NowMs();  // for Report: the update is the "fault"
  auto up2 = Bulwark({"update", WriteJobFile("job2.yaml", ", RELEASE: two"), "--now", "--why", "new release"});
  ASSERT_EQ(up2.exit_code, 0) << up2.err;
  s = Restarted("hot update", gen, Query("status")["job"]["last_step"]);
  EXPECT_EQ(s["job"]["placement"], json({"m01", "m02"})) << "no machine changed";
  EXPECT_EQ(MachineEnv("m01", "RELEASE"), "two") << "every process of release 1 is gone";
  EXPECT_EQ(MachineEnv("m02", "RELEASE"), "two");
  // The restart handed the ranks to processes set up beforehand.
  EXPECT_NE(Incident(0).value("why", "").find("staged on 2 of 2 machines"), std::string::npos) << Incident(0).dump();
  json inc = Incident(0);
  EXPECT_EQ(inc["class"], "manual");
  EXPECT_EQ(inc["resolution"], "updated");
  EXPECT_LE(inc.value("lost_steps", int64_t{99}), 1) << inc.dump();
  json r = LastEvent(s, "restore");
  ASSERT_TRUE(r.is_object()) << "no restore after the update";
  EXPECT_EQ(r["checksum"], ChecksumAt(r["step"])) << "parameters after the update differ from before it: " << r.dump();
  Report("update");

  // 2. A release that cannot start (its code fails to import): rolled back to 2.
  gen = Query("status")["job"]["generation"];
  const std::string bad = "[/bin/sh, -c, 'echo \"ModuleNotFoundError: No module named trainer\" >&2; exit 1']";
  ASSERT_EQ(Bulwark({"update", WriteJobFile("job3.yaml", ", RELEASE: three", "", bad), "--now"}).exit_code, 0);
  s = WaitFor("rollback to release 2", 90, [&](const json& x) {
    return x["job"]["generation"] > gen + 1 && x["job"]["state"] == "running" && MachineEnv("m01", "RELEASE") == "two";
  });
  json rel = Query("releases");
  ASSERT_EQ(rel["releases"].size(), 3u) << rel.dump();
  EXPECT_EQ(rel["applied"], 2);
  EXPECT_EQ(rel["releases"][2]["state"], "rolled back") << rel.dump();
  bool rolled = false;
  for (const json& i : Query("incidents")) rolled |= i["resolution"] == "rolled_back";
  EXPECT_TRUE(rolled) << Query("incidents").dump();
  EXPECT_EQ(s["job"]["placement"], json({"m01", "m02"}));
}

TEST_F(Releases, RequeueRestoresFromDurableStorageAfterItsDelayAndCountsLostSteps) {
  ASSERT_EQ(Bulwark({"up", "--machines", "2", "--standby", "1"}).exit_code, 0);
  auto sub = Bulwark({"submit", WriteJobFile("job.yaml", "", "recovery: {mode: requeue, provisioning_delay_s: 3}\n")});
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  json s = WaitFor("steps past a persisted one", 60, [](const json& x) { return x["job"]["last_step"] >= 25; });
  const int64_t gen = s["job"]["generation"];
  Inject("machine-down", "m02");
  s = Restarted("requeue", gen, 0);
  EXPECT_EQ(s["job"]["placement"], json({"m01", "m03"}));
  json inc = Incident(0);
  EXPECT_EQ(inc["resolution"], "requeued") << inc.dump();
  EXPECT_GE(inc.value("recover_s", 0.0), 3.0) << "the provisioning delay is part of recovery: " << inc.dump();
  json r = LastEvent(s, "restore");
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["source"], "durable") << "a requeued job's machines hold nothing in memory: " << r.dump();
  EXPECT_EQ(r["step"].get<int64_t>() % 10, 0) << r.dump();
  EXPECT_EQ(inc.value("restored_step", int64_t{-1}), r["step"]) << inc.dump();
  EXPECT_EQ(inc.value("lost_steps", int64_t{-1}), inc["step_at_fault"].get<int64_t>() - r["step"].get<int64_t>());
  EXPECT_EQ(r["checksum"], ChecksumAt(r["step"]));
  Report("requeue");
}

}  // namespace
}  // namespace bulwark
