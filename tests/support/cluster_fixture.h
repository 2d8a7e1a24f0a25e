// The local-cluster fixture of the end-to-end tests: a real cluster
// (controller + agents as processes) in a temp dir, driven through the
// bulwark binary; every wait polls `bulwark status --json` against a
// deadline, nothing relies on a fixed sleep.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/process.h"

namespace bulwark {

using nlohmann::json;

inline int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

class Cluster : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new std::string(testing::PreparedCorpus());
  }

  void SetUp() override { root_ = testing::MakeTempDir(); dir_ = root_ + "/cluster"; }
  void TearDown() override {
    Down();
    RemoveIfPassed();
  }
  void Down() {
    Bulwark({"down"});
    controller_.reset();
  }
  // A passing test's cluster (logs, shards, durable checkpoints) goes; a
  // failing one's stays to be read, and the test's output says where: the
  // rank logs of a flake once sat unread in /tmp among 2,000 others.
  void RemoveIfPassed() {
    std::error_code ignored;  // a leftover directory in /tmp is no failure
    if (!HasFailure() && !IsSkipped()) {
      std::filesystem::remove_all(root_, ignored);
    } else if (HasFailure()) {
      std::printf("[ kept   ] the cluster's logs: %s/machines/*/ranks, %s/controller.log\n", dir_.c_str(),
                  dir_.c_str());
    }
  }

  testing::ProcessResult Bulwark(std::vector<std::string> args, double timeout_s = 60) {
    args.insert(args.begin(), testing::BinDir() + "/bulwark");
    args.insert(args.end(), {"--dir", dir_});
    return testing::Run(args, {}, timeout_s);
  }

  json Query(const std::string& what) {
    auto r = Bulwark({what, "--json"}, 10);
    if (r.exit_code != 0) return json();
    json j = json::parse(r.out, nullptr, false);
    return j.is_discarded() ? json() : j;
  }

  // Polls status until `pred` holds; fails the test with the last status
  // and the controller log when `seconds` pass.
  json WaitFor(const std::string& what, double seconds, const std::function<bool(const json&)>& pred) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int>(seconds * 1000));
    json s;
    while (std::chrono::steady_clock::now() < deadline) {
      s = Query("status");
      if (!s.is_null() && !s["job"].is_null() && pred(s)) return s;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    std::ifstream log(dir_ + "/controller.log");
    std::string text((std::istreambuf_iterator<char>(log)), {});
    ADD_FAILURE() << "timed out waiting for " << what << "; last status: " << s.dump()
                  << "\nincidents: " << Query("incidents").dump() << "\ncontroller log:\n" << text;
    return s;
  }

  // Whether an incident evicted `machine`: a machine evicted on suspicion
  // may pass its checkup and be back in the pool before a poll sees it
  // evicted (controller/policy_checkup.cc).
  bool EvictedByAnIncident(const std::string& machine) {
    for (const json& i : Query("incidents")) {
      for (const json& m : i.value("evicted", json::array())) {
        if (m == machine) return true;
      }
    }
    return false;
  }

  // The slowdown a fail-slow incident measured, from its cause ("m04
  // computes 1.98x the others' time per step ..."); 0 when it names none.
  // A test that injects `slow --factor F` checks it against F, so an
  // emulation weaker than it claims fails the test instead of hiding.
  static double MeasuredSlowFactor(const json& inc) {
    const std::string cause = inc.value("cause", std::string());
    const size_t at = cause.find(" computes ");
    return at == std::string::npos ? 0.0 : std::atof(cause.c_str() + at + 10);
  }

  static std::string MachineState(const json& s, const std::string& id) {
    for (const json& m : s["machines"]) if (m["id"] == id) return m["state"];
    return "";
  }

  void WriteJob(int world_size = 2) {
    std::ofstream(root_ + "/job.yaml")
        << "name: tiny\nworld_size: " << world_size << "\n"
        << "args: [--config, tiny, --data, " << *data_ << ", --steps, '1000000', --log-format, json, "
        << "--ckpt-dir, " << root_ << "/ckpt, --ckpt-every, '20', --resume, --threads, '1', --dist-timeout, '10']\n"
        << "env: {OMP_NUM_THREADS: '1'}\n";
  }

  void Inject(const std::string& fault, const std::string& machine) {
    inject_ms_ = NowMs();
    auto r = Bulwark({"inject", fault, "--machine", machine});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }

  // The newest incident's timings as seen from the injection.
  void Report(const std::string& fault) {
    json inc = Query("incidents");
    ASSERT_TRUE(inc.is_array() && !inc.empty());
    const json& i = inc.back();
    std::printf("[ timing ] %-12s detect %.3f s (inject->controller), recover %.3f s (decision->first step), lost steps %s: %s\n",
                fault.c_str(), (i["detected_ms"].get<int64_t>() - inject_ms_) / 1000.0,
                i.value("recover_s", -1.0), i.contains("lost_steps") ? i["lost_steps"].dump().c_str() : "?",
                i["summary"].get<std::string>().c_str());
  }

  // The parameter checksum any rank printed after `step` (ranks hold the
  // same parameters; the trainer prints it with --step-checksum), searching
  // every rank log on every machine: a rank may have died before printing
  // a step whose state another rank saved for it.
  std::string ChecksumAt(int64_t step) {
    for (const char* m : {"m01", "m02", "m03", "m04", "m05"}) {
      for (const char* r : {"rank-0.log", "rank-1.log"}) {
        std::ifstream in(dir_ + "/machines/" + m + "/ranks/" + r);
        std::string line;
        while (std::getline(in, line)) {
          json j = json::parse(line, nullptr, false);
          if (!j.is_object() || j.value("step", int64_t{-1}) != step || !j.contains("checksum")) continue;
          if (j.value("event", "") == "step" || j.value("event", "") == "checksum") return j["checksum"];
        }
      }
    }
    return "";
  }
  // The newest `kind` event of rank 0, on the machine now in slot 0.
  // The rungs an incident's ladder climbed, in order, each printed with its
  // time and outcome.
  static std::vector<std::string> LadderRungs(const json& inc) {
    std::vector<std::string> rungs;
    for (const json& r : inc.value("ladder", json::array())) {
      rungs.push_back(r["rung"]);
      std::printf("[ timing ] %-9s %.3f s: %s\n", r["rung"].get<std::string>().c_str(), r.value("seconds", -1.0),
                  r["outcome"].get<std::string>().c_str());
    }
    return rungs;
  }
  json LastEvent(const json& status, const std::string& kind) {
    std::ifstream in(dir_ + "/machines/" + status["job"]["placement"][0].get<std::string>() + "/ranks/rank-0.log");
    std::string line;
    json last;
    while (std::getline(in, line)) {
      json j = json::parse(line, nullptr, false);
      if (j.is_object() && j.value("event", "") == kind) last = j;
    }
    return last;
  }

  // ---- the ranks' own output

  std::string RankLog(const std::string& machine, const std::string& file) const {
    return dir_ + "/machines/" + machine + "/ranks/" + file;
  }
  static std::string ReadAll(const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  }
  // Every JSON event `kind` in a log, in order.
  static std::vector<json> Events(const std::string& path, const std::string& kind) {
    std::vector<json> out;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      json j = json::parse(line, nullptr, false);
      if (j.is_object() && j.value("event", "") == kind) out.push_back(j);
    }
    return out;
  }
  // The agent's start banners of a rank log: generation -> (path, pid).
  std::map<int64_t, std::pair<std::string, int64_t>> Banners(const std::string& path) {
    std::map<int64_t, std::pair<std::string, int64_t>> out;
    std::ifstream in(path);
    std::string line;
    const std::string gen = " of generation ", open = " (", pid = ", pid ";
    while (std::getline(in, line)) {
      if (line.rfind("bulwark-agent: starting rank", 0) != 0) continue;
      const size_t g = line.find(gen), o = line.find(open, g), p = line.find(pid, o);
      if (g == std::string::npos || o == std::string::npos || p == std::string::npos) continue;
      out[std::stoll(line.substr(g + gen.size()))] = {line.substr(o + 2, p - o - 2), std::stoll(line.substr(p + pid.size()))};
    }
    return out;
  }
  // Waits until `path` holds a `kind` event; returns the newest.
  json WaitForEvent(const std::string& what, const std::string& path, const std::string& kind, double seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int>(seconds * 1000));
    while (std::chrono::steady_clock::now() < deadline) {
      std::vector<json> ev = Events(path, kind);
      if (!ev.empty()) return ev.back();
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    ADD_FAILURE() << "timed out waiting for " << what << " in " << path;
    return json();
  }
  // Rank 0's final checksum of `trainer_args` run by `ranks` ranks directly:
  // the fault-free run a faulted one must end equal to.
  static std::string ReferenceChecksum(std::vector<std::string> trainer_args, int ranks,
                                       const std::map<std::string, std::string>& env = {{"OMP_NUM_THREADS", "1"}}) {
    trainer_args.insert(trainer_args.begin(), testing::BinDir() + "/bulwark-train");
    auto procs = testing::StartRanks(trainer_args, ranks, env);
    EXPECT_EQ(procs.size(), static_cast<size_t>(ranks)) << "rank 0 did not announce its rendezvous port";
    std::string sum;
    for (size_t r = 0; r < procs.size(); ++r) {
      // As long as the test may take: under load a 900-step reference run
      // of 3 ranks outlasted the default 120 s, and its killed rank 0 took
      // the others with it.
      testing::ProcessResult res = procs[r]->Wait(600);
      EXPECT_EQ(res.exit_code, 0) << "reference rank " << r << ": " << res.err;
      json done = json::parse(res.LastLine(), nullptr, false);
      if (r == 0) sum = done.is_object() ? done.value("param_checksum", "") : "";
    }
    return sum;
  }

  // ---- a controller killed at a point (plane/kill_point.h)

  // Waits until the controller process `pid` is gone (killed at its point).
  bool Dead(pid_t pid, double seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int>(seconds * 1000));
    while (std::chrono::steady_clock::now() < deadline) {
      std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
      std::string line;
      if (!std::getline(stat, line)) return true;
      const size_t paren = line.rfind(')');
      if (paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z') return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  // Starts a controller that dies at `kill_at` ("" for none).
  void StartController(const std::string& kill_at) {
    std::map<std::string, std::string> env;
    if (!kill_at.empty()) env["BULWARK_TEST_KILL_AT"] = kill_at;
    controller_ = std::make_unique<testing::Process>(
        std::vector<std::string>{testing::BinDir() + "/bulwark", "controller", "--dir", dir_}, env);
  }

  // The controller started by this test dies at its point: its own words.
  void ExpectKilledAt(const std::string& point) {
    ASSERT_TRUE(controller_);
    testing::ProcessResult r = controller_->Wait(60);
    EXPECT_NE(r.err.find("kill point " + point + " reached"), std::string::npos) << r.err.substr(r.err.size() > 3000 ? r.err.size() - 3000 : 0);
  }

  // A restarted controller rebuilds from its journal at once, but its
  // agents reconnect on their own schedule: a fault injected before they
  // have would meet a controller that cannot reach them (their peer-lost
  // echoes then outlast their grace and count as crashes).
  void WaitAgentsBack() {
    // The first answer of the new controller (it may still be starting).
    const int64_t step = WaitFor("the controller answering", 30, [](const json&) { return true; })["job"]
                             .value("last_step", int64_t{0});
    WaitFor("agents reconnected and steps flowing", 30, [&](const json& s) {
      if (s["job"]["last_step"].get<int64_t>() < step + 10) return false;
      for (const json& m : s["machines"]) {
        if (m["state"] == "active" && m["last_heard_s_ago"].get<double>() > 0.6) return false;
      }
      return true;
    });
  }

  inline static std::string* data_ = nullptr;
  std::string root_, dir_;
  int64_t inject_ms_ = 0;
  std::unique_ptr<testing::Process> controller_;
};

}  // namespace bulwark
