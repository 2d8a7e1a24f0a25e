// bulwark bench-ladder: the stop-time ladder's rungs on a mixed schedule of
// injected faults, on a 4-machine cluster (tiny model, one rank per
// machine) with two standbys and the ladder's tests compute and device
// (alignment left out, so that silent corruption is the replay's to find,
// as in ByteRobust where replay is the last resort). Per round, in order:
//   transient      `inject kill`: an unsigned crash, restarted in place
//   compute-fail   `inject compute-fail`: the machine's GEMM check is wrong
//                  and its matmuls go NaN; a NaN with no culprit comes back
//                  after the reattempt, and the diagnose rung evicts it
//   bad-release    `bulwark update --now` of a command that cannot start:
//                  rolled back
//   sdc            `inject sdc` (nan): every machine passes diagnostics;
//                  dual-phase replay names it
// For each fault, the mechanism that resolved it (the last incident it
// caused), and for each rung climbed, its time; printed beside ByteRobust's
// shares of incidents per mechanism. Figures only, no assertions.
#include <algorithm>
#include <cstdio>
#include <map>

#include "common/files.h"
#include "demo/demo.h"
#include "demo/report.h"
#include "demo/session.h"

namespace bulwark::demo {
namespace {

// ByteRobust's 19 largest jobs (reference/byterobust.md §2.4).
const std::map<std::string, double> kByteRobustShare = {
    {"eviction", 32.5}, {"reattempt", 22.7}, {"rollback", 9.2}, {"replay", 1.2}};

// What resolved an incident, in ByteRobust's terms.
std::string Mechanism(const json& inc) {
  const std::string res = inc.value("resolution", "");
  if (res == "rolled_back") return "rollback";
  if (res == "reattempt") return "reattempt";
  if (res == "evicted_and_replaced") {
    for (const json& r : inc.value("ladder", json::array())) {
      if (r["rung"] == "replay" && r.value("outcome", "").rfind("culprit", 0) == 0) return "replay";
    }
    return "eviction";
  }
  return res.empty() ? "unknown" : res;
}

}  // namespace

Status RunLadderBench(const BenchOptions& o) {
  BULWARK_RETURN_IF_ERROR(PrepareRunDir(o.exe_dir, o.data, o.out));
  Result<std::unique_ptr<Session>> sp =
      Session::Up(o.exe_dir, o.out + "/cluster", 4, 2, false, {"--ladder-tests", "compute,device"});
  if (!sp.ok()) return sp.status();
  Session& s = **sp;
  const std::vector<std::string> args = {"--config", o.config, "--data", o.data, "--steps", "10000000",
                                         "--log-format", "json", "--ckpt-dir", o.out + "/ckpt", "--ckpt-every",
                                         "200", "--resume", "--threads", std::to_string(o.threads),
                                         "--dist-timeout", "30"};
  const std::map<std::string, std::string> env = {{"OMP_NUM_THREADS", std::to_string(o.threads)}};
  BULWARK_RETURN_IF_ERROR(s.Submit("bench", 4, args, env));
  auto step = [](const json& st) { return st["job"].value("last_step", int64_t{0}); };
  Result<json> st = s.WaitFor("the first steps", 120, [&](const json& st) { return step(st) >= 20; });
  if (!st.ok()) return st.status();

  json samples = json::array();
  std::map<std::string, std::vector<double>> rung_s;  // rung -> seconds, every climb
  const char* kFaults[] = {"transient", "compute-fail", "bad-release", "sdc"};
  for (int round = 0; round < o.repeat; ++round) {
    for (const char* fault : kFaults) {
      const int64_t target = step(*st) + 30;
      st = s.WaitFor("training to step " + std::to_string(target), 180, [&](const json& x) {
        return step(x) >= target && x["job"]["state"] == "running";
      });
      if (!st.ok()) return st.status();
      const std::string victim = Session::SlotMachine(*st, static_cast<size_t>(1 + round % 3));
      const int64_t before = (*st)["job"].value("incidents", int64_t{0});
      const int64_t gen = (*st)["job"].value("generation", int64_t{0});
      Result<json> rel = s.Releases();
      if (!rel.ok()) return rel.status();
      const int64_t applied_before = (*rel).value("applied", int64_t{0});
      int64_t inject_ms = WallMs();
      const std::string f = fault;
      if (f == "transient") {
        Result<int> n = s.Inject("kill", victim, &inject_ms);
        if (!n.ok()) return n.status();
      } else if (f == "compute-fail" || f == "sdc") {
        Result<int> n = s.Inject(f, victim, &inject_ms);
        if (!n.ok()) return n.status();
      } else {
        std::vector<std::string> bad = args;
        bad.push_back("--no-such-flag");  // the release's ranks exit at once with a usage error
        Result<int> n = s.Update("bench", 4, bad, env, /*now=*/true, "bench: a release that cannot start");
        if (!n.ok()) return n.status();
      }
      // Resolved: the job runs again past where it was, with the fault's
      // last incident closed (a machine fault: with the machine evicted).
      json last;
      Result<json> done = s.WaitFor(f + " resolved", 600, [&](const json& x) {
        if (x["job"]["state"] != "running" || x["job"].value("generation", int64_t{0}) <= gen) return false;
        if ((f == "compute-fail" || f == "sdc") && Session::MachineState(x, victim) != "evicted") return false;
        const int64_t n = x["job"].value("incidents", int64_t{0});
        if (n <= before) return false;
        Result<json> inc = s.FindIncident(n);
        if (!inc.ok() || !inc->value("closed", false)) return false;
        if (f == "bad-release") {
          // Rolled back: the release applied before the update is applied
          // again (the incident may end otherwise: a machine its crashes
          // got evicted, a heartbeat lost on the loaded host meanwhile).
          Result<json> r = s.Releases();
          if (!r.ok() || r->value("applied", int64_t{0}) != applied_before || r->value("pending", int64_t{0}) != 0) {
            return false;
          }
        }
        last = *inc;
        return true;
      });
      if (!done.ok()) return done.status();
      st = done;
      const double resolved_s = (WallMs() - inject_ms) / 1000.0;
      // Every incident this fault caused, and the rungs they climbed.
      json rungs = json::array();
      for (int64_t id = before + 1; id <= last["id"].get<int64_t>(); ++id) {
        Result<json> inc = s.FindIncident(id);
        if (!inc.ok()) continue;
        for (const json& r : inc->value("ladder", json::array())) {
          if (r.contains("seconds")) rung_s[r["rung"].get<std::string>()].push_back(r["seconds"].get<double>());
          rungs.push_back(r);
        }
      }
      std::string mech = Mechanism(last);
      if (f == "bad-release") mech = "rollback";  // the wait above saw it rolled back
      json evicted_all = json::array();  // every eviction on the way, e.g. a healthy machine the bad release crashed on
      for (int64_t id = before + 1; id <= last["id"].get<int64_t>(); ++id) {
        Result<json> inc = s.FindIncident(id);
        if (!inc.ok()) continue;
        for (const json& m : inc->value("evicted", json::array())) {
          if (std::find(evicted_all.begin(), evicted_all.end(), m) == evicted_all.end()) evicted_all.push_back(m);
        }
      }
      json x{{"fault", f}, {"machine", victim}, {"incidents", last["id"].get<int64_t>() - before},
             {"mechanism", mech}, {"evicted", evicted_all}, {"resolved_s", resolved_s},
             {"recover_s", last.value("recover_s", -1.0)}, {"ladder", rungs}};
      std::printf("  round %d %-13s on %s: %s after %lld incident(s), %.1f s from the injection to training again;",
                  round + 1, fault, victim.c_str(), mech.c_str(), static_cast<long long>(x["incidents"].get<int64_t>()),
                  resolved_s);
      for (const json& r : rungs) std::printf(" [%s %.1f s]", r["rung"].get<std::string>().c_str(), r.value("seconds", -1.0));
      if (!evicted_all.empty()) std::printf(" evicted %s", evicted_all.dump().c_str());
      std::printf("\n");
      std::fflush(stdout);
      samples.push_back(x);
      for (const json& m : evicted_all) BULWARK_RETURN_IF_ERROR(s.ReturnToStandby(m.get<std::string>()));
      Result<json> now = s.StatusJson();
      if (!now.ok()) return now.status();
      st = now;
    }
  }
  Result<json> ledger = s.Ledger();
  if (!ledger.ok()) return ledger.status();
  BULWARK_RETURN_IF_ERROR(s.Down());

  std::printf("\nbench/ladder: %s config, 4 ranks (1 per machine, %d thread each), ladder tests compute,device, "
              "%d round(s) of %zu faults\n", o.config.c_str(), o.threads, o.repeat, std::size(kFaults));
  std::printf("  time per rung (median over every climb, this host):\n");
  json per_rung = json::object();
  for (const auto& [rung, v] : rung_s) {
    std::printf("    %-10s %6.1f s  (%zu climb(s))\n", rung.c_str(), Median(v), v.size());
    per_rung[rung] = {{"median_s", Median(v)}, {"n", v.size()}};
  }
  std::map<std::string, int> count;
  for (const json& x : samples) ++count[x["mechanism"].get<std::string>()];
  std::printf("  share of faults resolved, by mechanism   here   ByteRobust (share of all incidents)\n");
  json shares = json::object();
  for (const auto& [mech, ref] : kByteRobustShare) {
    const double here = samples.empty() ? 0 : 100.0 * count[mech] / static_cast<double>(samples.size());
    std::printf("    %-36s %5.1f%%  %5.1f%%\n", mech.c_str(), here, ref);
    shares[mech] = {{"here_pct", here}, {"byterobust_pct", ref}};
  }
  std::printf("  (here: the injected schedule decides the mix, one fault of each kind per round, so the shares say that "
              "each fault reached the rung meant for it, not how often faults of each kind occur; ByteRobust's are "
              "measured over its production incidents and do not sum to 100)\n");
  std::printf("\n%s", LedgerTable(*ledger).c_str());
  const json record{{"config", o.config}, {"repeat", o.repeat}, {"samples", samples}, {"per_rung", per_rung},
                    {"shares", shares}, {"ledger", *ledger}};
  BULWARK_RETURN_IF_ERROR(WriteFileAtomic(o.out + "/result.json", record.dump(2) + "\n"));
  std::printf("  raw samples: %s/result.json\n", o.out.c_str());
  return Status::OK();
}

}  // namespace bulwark::demo
