// bulwark bench-compare: the same faults under the conventional requeue
// (`recovery: {mode: requeue}`: stop every rank, give the machines back,
// wait for machines acquired cold, restore from durable storage) and under
// bulwark's path (warm standbys, every-step in-memory checkpoints, restart
// in place), on two fresh local clusters, one after the other.
//
// Per fault, from the injection (or the update call):
//   first step   the first step any rank completes after it
//   regain       the first step past the newest one completed before it:
//                when the job is productive again (ByteRobust's recovery
//                includes redoing lost steps)
//   lost         steps completed before the fault and done again
//   stall        from the last step the old runs completed (the fault, or
//                for a staged hot update the moment the old ranks stopped:
//                they train on while the new release is set up) to regain:
//                the time the job was not productive
// The requeue runs with no provisioning delay; the modeled delay is added
// to its figures, disclosed beside them, and the ratio is given both ways.
// Figures only, never judged.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "common/files.h"
#include "demo/demo.h"
#include "demo/session.h"

namespace bulwark::demo {
namespace {

const char* const kFaults[] = {"machine-down", "update", "kill"};

struct Timing {
  int64_t progress = 0;        // newest step the runs begun before the fault completed
  int64_t first_ms = -1;       // first step of a run begun after it
  int64_t regain_ms = -1;      // first step past `progress` of a run begun after it
  int64_t last_old_ms = -1;    // the last step of the runs begun before it
};

// Reads every rank log of the cluster. A log holds one run after another
// (a restarted rank appends); each run opens with a "start" event stamped
// with the wall clock, and its steps belong to it. Steps of the runs that
// began before the fault are the progress it put at risk, wherever they
// were printed (old ranks train on until they are stopped).
Timing TimeFromLogs(const cluster::Layout& layout, int64_t fault_ms) {
  Timing t;
  std::vector<std::pair<int64_t, int64_t>> after;  // (wall ms, step) of runs begun after the fault
  std::error_code ec;
  for (const auto& m : std::filesystem::directory_iterator(layout.machines(), ec)) {
    for (int rank = 0; rank < 2; ++rank) {
      int64_t run_start = -1;
      for (const json& e : Events(layout.rank_log(m.path().filename().string(), rank))) {
        const std::string kind = e.value("event", "");
        if (kind == "start") run_start = e.value("wall_ms", int64_t{-1});
        if (kind != "step" || !e.contains("wall_ms")) continue;
        if (run_start <= fault_ms) {
          t.progress = std::max(t.progress, e["step"].get<int64_t>());
          t.last_old_ms = std::max(t.last_old_ms, e["wall_ms"].get<int64_t>());
        } else {
          after.emplace_back(e["wall_ms"].get<int64_t>(), e["step"].get<int64_t>());
        }
      }
    }
  }
  for (const auto& [at, step] : after) {
    if (t.first_ms < 0 || at < t.first_ms) t.first_ms = at;
    if (step > t.progress && (t.regain_ms < 0 || at < t.regain_ms)) t.regain_ms = at;
  }
  return t;
}

Result<json> RunMode(const CompareBenchOptions& o, const std::string& mode) {
  const std::string dir = o.out + "/" + mode;
  Result<std::unique_ptr<Session>> sp = Session::Up(o.exe_dir, dir, 2, o.repeat + 1);
  if (!sp.ok()) return sp.status();
  Session& s = **sp;
  const std::vector<std::string> args = {"--config", o.config, "--data", o.data, "--steps", "10000000",
                                         "--log-format", "json", "--log-every", "1", "--threads",
                                         std::to_string(o.threads), "--dist-timeout", "10", "--memory-ckpt", "on"};
  std::map<std::string, std::string> env = {{"OMP_NUM_THREADS", std::to_string(o.threads)},
                                            {"BULWARK_BENCH_RELEASE", "1"}};
  BULWARK_RETURN_IF_ERROR(s.Submit("bench", 2, args, env, o.persist_every, mode, 0));
  auto step = [](const json& st) { return st["job"].value("last_step", int64_t{0}); };
  Result<json> st = s.WaitFor("the first step", 120, [&](const json& st) { return step(st) >= 1; });
  if (!st.ok()) return st.status();

  json samples = json::array();
  int release = 1;
  for (const char* fault : kFaults) {
    for (int k = 0; k < o.repeat; ++k) {
      // Some seconds of steady training between faults, as bench-recovery.
      const int64_t target = step(*st) + 25;
      const int64_t not_before = WallMs() + 8000;
      st = s.WaitFor("training to step " + std::to_string(target), 120,
                     [&](const json& x) { return step(x) >= target && WallMs() >= not_before; });
      if (!st.ok()) return st.status();
      const std::string victim = Session::SlotMachine(*st, static_cast<size_t>(k % 2));
      const int64_t before = (*st)["job"].value("incidents", int64_t{0});
      int64_t fault_ms = 0;
      if (std::string(fault) == "update") {
        env["BULWARK_BENCH_RELEASE"] = std::to_string(++release);
        fault_ms = WallMs();
        Result<int> n = s.Update("bench", 2, args, env, /*now=*/true, "bench: release " + std::to_string(release));
        if (!n.ok()) return n.status();
      } else {
        Result<int> sends = s.Inject(fault, victim, &fault_ms);
        if (!sends.ok()) return sends.status();
      }
      Result<json> inc = s.AwaitNewIncident(before, 60);
      if (!inc.ok()) return inc.status();
      Result<json> closed = s.AwaitClosed((*inc)["id"].get<int64_t>(), 180);
      if (!closed.ok()) return closed.status();
      // The regained step is in the logs a moment after the first one.
      Timing t;
      Result<json> caught_up = s.WaitFor("regaining the progress before the fault", 120, [&](const json&) {
        t = TimeFromLogs(s.layout(), fault_ms);
        return t.regain_ms > 0;
      });
      if (!caught_up.ok()) return caught_up.status();
      st = s.StatusJson();
      if (!st.ok()) return st.status();
      json x{{"mode", mode},
             {"fault", fault},
             {"machine", std::string(fault) == "update" ? "" : victim},
             {"resolution", (*closed)["resolution"]},
             {"restore_source", closed->value("restore_source", "")},
             {"progress_step", t.progress},
             {"restored_step", closed->value("restored_step", int64_t{-1})},
             {"lost_steps", std::max<int64_t>(0, t.progress - closed->value("restored_step", t.progress))},
             {"first_step_s", (t.first_ms - fault_ms) / 1000.0},
             {"regain_s", (t.regain_ms - fault_ms) / 1000.0},
             {"stall_s", (t.regain_ms - std::max(fault_ms, t.last_old_ms)) / 1000.0},
             // Both paths get the same detection: from the controller's
             // detection on, the difference is recovery alone.
             {"regain_after_detect_s", (t.regain_ms - closed->value("detected_ms", fault_ms)) / 1000.0}};
      std::printf("  %-8s %-12s #%d: first step %6.2f s, regained %6.2f s, lost %3lld steps, restored from %s (%s)\n",
                  mode.c_str(), fault, k + 1, x["first_step_s"].get<double>(), x["regain_s"].get<double>(),
                  static_cast<long long>(x["lost_steps"].get<int64_t>()),
                  x["restore_source"].get<std::string>().empty() ? "?" : x["restore_source"].get<std::string>().c_str(),
                  x["resolution"].get<std::string>().c_str());
      std::fflush(stdout);
      samples.push_back(std::move(x));
      for (const json& m : (*closed)["evicted"]) {
        const std::string id = m.get<std::string>();
        if (std::string(fault) == "machine-down" && id == victim) continue;
        BULWARK_RETURN_IF_ERROR(s.ReturnToStandby(id));
      }
    }
  }
  BULWARK_RETURN_IF_ERROR(s.Down());
  return samples;
}

double MedianOf(const json& samples, const std::string& mode, const std::string& fault, const char* field) {
  std::vector<double> v;
  for (const json& x : samples) {
    if (x["mode"] == mode && x["fault"] == fault) v.push_back(x[field].get<double>());
  }
  return Median(v);
}

}  // namespace

Status RunCompareBench(const CompareBenchOptions& o) {
  BULWARK_RETURN_IF_ERROR(PrepareRunDir(o.exe_dir, o.data, o.out));
  json samples = json::array();
  for (const char* mode : {"standby", "requeue"}) {
    std::printf("%s:\n", mode);
    Result<json> r = RunMode(o, mode);
    if (!r.ok()) return r.status().Annotate(std::string("bench-compare, ") + mode + " mode");
    for (json& x : *r) samples.push_back(std::move(x));
  }
  const double delay = o.provisioning_delay_s;
  std::printf("\nbench/recovery_comparison: %s config, 2 ranks (1 per machine, %d thread each), %d faults per class;\n"
              "medians; durable checkpoints every %d steps; requeue measured with no provisioning delay,\n"
              "then with a modeled %.0f s added (ByteRobust: failover without standbys takes >10 min at 10k GPUs);\n"
              "'det.': timed from the controller's detection, which both paths share; 'stall': from the old runs'\n"
              "last step to regain, the time the job was not productive (a staged hot update trains on while\n"
              "its new release is set up)\n\n",
              o.config.c_str(), o.threads, o.repeat, o.persist_every, delay);
  std::printf("  %-13s | %-33s | %-33s | %-41s\n", "", "bulwark (standby, memory)", "requeue (durable)",
              "ratio: requeue/bulwark regain");
  const std::string modeled = "+" + std::to_string(o.provisioning_delay_s) + " s";
  std::printf("  %-13s | %8s %8s %8s %6s | %8s %8s %8s %6s | %8s %10s %10s %10s\n", "fault", "first", "regain",
              "stall", "lost", "first", "regain", "stall", "lost", "0 s", modeled.c_str(), "0 s, det.", "0 s, stall");
  json summary = json::object();
  const std::map<std::string, std::string> kByteRobust = {{"machine-down", "warm standby vs requeue: 10.87x"},
                                                          {"update", "hot update vs requeue: 11.04x"},
                                                          {"kill", "(no published ratio)"}};
  for (const char* fault : kFaults) {
    const double bf = MedianOf(samples, "standby", fault, "first_step_s"), br = MedianOf(samples, "standby", fault, "regain_s");
    const double qf = MedianOf(samples, "requeue", fault, "first_step_s"), qr = MedianOf(samples, "requeue", fault, "regain_s");
    std::vector<double> bl, ql;
    for (const json& x : samples) {
      if (x["fault"] != fault) continue;
      (x["mode"] == "standby" ? bl : ql).push_back(static_cast<double>(x["lost_steps"].get<int64_t>()));
    }
    const double ratio0 = br > 0 ? qr / br : -1, ratio_modeled = br > 0 ? (qr + delay) / br : -1;
    const double bd = MedianOf(samples, "standby", fault, "regain_after_detect_s");
    const double qd = MedianOf(samples, "requeue", fault, "regain_after_detect_s");
    const double ratio_det = bd > 0 ? qd / bd : -1;
    const double bs = MedianOf(samples, "standby", fault, "stall_s"), qs = MedianOf(samples, "requeue", fault, "stall_s");
    const double ratio_stall = bs > 0 ? qs / bs : -1;
    std::printf("  %-13s | %7.2fs %7.2fs %7.2fs %6.0f | %7.2fs %7.2fs %7.2fs %6.0f | %7.1fx %9.1fx %9.1fx %9.1fx   "
                "ByteRobust %s\n",
                fault, bf, br, bs, Median(bl), qf, qr, qs, Median(ql), ratio0, ratio_modeled, ratio_det, ratio_stall,
                kByteRobust.at(fault).c_str());
    summary[fault] = {{"bulwark_first_step_s", bf}, {"bulwark_regain_s", br}, {"bulwark_lost_steps", Median(bl)},
                      {"requeue_first_step_s", qf}, {"requeue_regain_s", qr}, {"requeue_lost_steps", Median(ql)},
                      {"ratio_no_delay", ratio0}, {"ratio_modeled_delay", ratio_modeled},
                      {"bulwark_regain_after_detect_s", bd}, {"requeue_regain_after_detect_s", qd},
                      {"ratio_no_delay_after_detect", ratio_det}, {"bulwark_stall_s", bs}, {"requeue_stall_s", qs},
                      {"ratio_no_delay_stall", ratio_stall}};
  }
  json result{{"config", o.config}, {"threads", o.threads}, {"repeat", o.repeat}, {"persist_every", o.persist_every},
              {"provisioning_delay_s", o.provisioning_delay_s}, {"summary", summary}, {"samples", samples}};
  BULWARK_RETURN_IF_ERROR(WriteFileAtomic(o.out + "/result.json", result.dump(2) + "\n"));
  std::printf("\nsamples: %s/result.json\n", o.out.c_str());
  return Status::OK();
}

}  // namespace bulwark::demo
