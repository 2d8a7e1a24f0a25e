// bulwark bench-implicit: every implicit fault class `repeat` times on a
// 4-machine cluster (tiny model, one rank per machine) with two standbys,
// one fault at a time; evicted machines are returned to the pool after
// each incident. Per class, medians of:
//   detect     the fault (the last step before it) -> the controller's suspicion
//   localize   suspicion -> culprit named (stacks captured and analyzed, or
//              the ranks' reports of the bad step in)
//   recover    restart decision -> first step
//   lost       steps computed again
// and how often the injected machine was the one evicted (loss-spike and a
// hang nobody stands out in evict nothing by design). Figures only.
#include <cstdio>

#include "common/files.h"
#include "demo/demo.h"
#include "demo/report.h"
#include "demo/session.h"

namespace bulwark::demo {
namespace {

struct Class {
  const char* name;
  const char* fault;
  const char* where;
  double factor;
  bool evicts;  // the injected machine should go
};
constexpr Class kClasses[] = {
    {"hang-collective", "hang", "collective", 0, true},
    {"hang-compute", "hang", "compute", 0, true},
    {"nan", "nan", "", 0, true},
    {"loss-spike", "loss-spike", "", 0, false},
    {"slow-2x", "slow", "", 2.0, true},
};

}  // namespace

Status RunImplicitBench(const BenchOptions& o) {
  BULWARK_RETURN_IF_ERROR(PrepareRunDir(o.exe_dir, o.data, o.out));
  Result<std::unique_ptr<Session>> sp = Session::Up(o.exe_dir, o.out + "/cluster", 4, 2);
  if (!sp.ok()) return sp.status();
  Session& s = **sp;
  BULWARK_RETURN_IF_ERROR(s.Submit("bench", 4,
      {"--config", o.config, "--data", o.data, "--steps", "10000000", "--log-format", "json", "--ckpt-dir",
       o.out + "/ckpt", "--ckpt-every", "200", "--resume", "--threads", std::to_string(o.threads), "--dist-timeout", "30"},
      {{"OMP_NUM_THREADS", std::to_string(o.threads)}}));
  auto step = [](const json& st) { return st["job"].value("last_step", int64_t{0}); };
  Result<json> st = s.WaitFor("the first steps", 120, [&](const json& st) { return step(st) >= 20; });
  if (!st.ok()) return st.status();

  json samples = json::array();
  for (const Class& c : kClasses) {
    for (int k = 0; k < o.repeat; ++k) {
      // Some seconds of steady training since the last restart, so the hang
      // detector has learned the step time again.
      const int64_t target = step(*st) + 40;
      const int64_t not_before = WallMs() + 6000;
      st = s.WaitFor("training to step " + std::to_string(target), 120,
                     [&](const json& x) { return step(x) >= target && WallMs() >= not_before; });
      if (!st.ok()) return st.status();
      const std::string victim = Session::SlotMachine(*st, static_cast<size_t>(1 + k % 3));
      const int64_t before = (*st)["job"].value("incidents", int64_t{0});
      int64_t inject_ms = 0;
      Result<int> sends = s.Inject(c.fault, victim, &inject_ms, c.where, c.factor);
      if (!sends.ok()) return sends.status();
      Result<json> inc = s.AwaitNewIncident(before, c.factor > 0 ? 180 : 60);
      if (!inc.ok()) return inc.status();
      Result<json> closed = s.AwaitClosed((*inc)["id"].get<int64_t>(), 120);
      if (!closed.ok()) return closed.status();
      st = s.StatusJson();
      if (!st.ok()) return st.status();
      const json& evicted = (*closed)["evicted"];
      const bool right = c.evicts ? evicted == json::array({victim}) : evicted.empty();
      json x{{"class", c.name}, {"machine", victim}, {"incident", (*closed)["id"]},
             {"resolution", (*closed)["resolution"]}, {"evicted", evicted}, {"right", right},
             {"detect_s", closed->value("detect_s", -1.0)},
             {"inject_to_detect_s", ((*closed)["detected_ms"].get<int64_t>() - inject_ms) / 1000.0},
             {"localize_s", closed->value("localize_s", -1.0)}, {"recover_s", closed->value("recover_s", -1.0)},
             {"lost_steps", closed->value("lost_steps", int64_t{-1})}};
      std::printf("  %-16s #%d on %s: detect %.2f s (%.2f s after injection), localize %.2f s, recover %.2f s, lost %lld, "
                  "%s%s\n",
                  c.name, k + 1, victim.c_str(), x["detect_s"].get<double>(), x["inject_to_detect_s"].get<double>(),
                  x["localize_s"].get<double>(), x["recover_s"].get<double>(),
                  static_cast<long long>(x["lost_steps"].get<int64_t>()), x["resolution"].get<std::string>().c_str(),
                  right ? "" : (" - WRONG: evicted " + evicted.dump()).c_str());
      std::fflush(stdout);
      samples.push_back(x);
      for (const json& m : evicted) BULWARK_RETURN_IF_ERROR(s.ReturnToStandby(m.get<std::string>()));
    }
  }
  Result<json> ledger = s.Ledger();
  if (!ledger.ok()) return ledger.status();
  BULWARK_RETURN_IF_ERROR(s.Down());

  std::printf("\nbench/implicit: %s config, 4 ranks (1 per machine, %d thread each), %d injections per class; medians\n",
              o.config.c_str(), o.threads, o.repeat);
  std::printf("  %-16s %9s %12s %9s %9s %6s %8s\n", "class", "detect", "from inject", "localize", "recover", "lost", "right");
  json summary = json::object();
  for (const Class& c : kClasses) {
    auto med = [&](const std::string& key) {
      std::vector<double> v;
      for (const json& x : samples) if (x["class"] == c.name) v.push_back(x[key].get<double>());
      return Median(v);
    };
    int right = 0, n = 0;
    for (const json& x : samples) {
      if (x["class"] != c.name) continue;
      ++n;
      right += x["right"].get<bool>();
    }
    std::printf("  %-16s %7.2f s %10.2f s %7.2f s %7.2f s %6.0f %5d/%d\n", c.name, med("detect_s"),
                med("inject_to_detect_s"), med("localize_s"), med("recover_s"), med("lost_steps"), right, n);
    summary[c.name] = {{"detect_s", med("detect_s")}, {"inject_to_detect_s", med("inject_to_detect_s")},
                       {"localize_s", med("localize_s")}, {"recover_s", med("recover_s")},
                       {"lost_steps", med("lost_steps")}, {"right", right}, {"n", n}};
  }
  std::printf("\n%s", LedgerTable(*ledger).c_str());
  std::printf("  (detect: the fault -> the controller's suspicion; for a hang the fault is the last step before it, for a "
              "slow machine no fault time is known: see from inject; "
              "localize: suspicion -> culprit named; recover: restart decision -> first step; right: the injected machine "
              "and only it evicted, or nothing for loss-spike)\n");
  const json record{{"config", o.config}, {"repeat", o.repeat}, {"samples", samples}, {"medians", summary}, {"ledger", *ledger}};
  BULWARK_RETURN_IF_ERROR(WriteFileAtomic(o.out + "/result.json", record.dump(2) + "\n"));
  std::printf("  raw samples: %s/result.json\n", o.out.c_str());
  return Status::OK();
}

}  // namespace bulwark::demo
