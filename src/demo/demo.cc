// bulwark demo: the scenario, its live line and its report files. The
// schedule is data (kSchedule); RunSchedule walks it, waiting with a
// deadline at every stage, and any stage that overruns ends the demo with a
// message that names it.
#include "demo/demo.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <thread>

#include "cluster/local/emulated_hardware.h"
#include "common/files.h"
#include "controller/policy_config.h"
#include "demo/report.h"
#include "demo/session.h"

namespace bulwark::demo {
namespace {

// One entry of the fault schedule. `slot` picks the victim by its place in
// the job (rank slot), resolved at injection time, since evictions move ranks.
enum class Expect {
  kRecovers,   // an incident, then training resumes on its own
  kTolerated,  // no incident: training goes on
  kNarrows,    // an incident, no standby left: the survivors train on
               // fewer replicas until a repaired machine is handed back
};
struct Planned {
  const char* fault;
  size_t slot;
  Expect expect;
  const char* why;  // printed as it happens
  const char* where = "";  // hang: collective or compute
  double factor = 0;       // slow
  // The evicted machine is handed back once the job recovered (an
  // operator's repair), so the pool holds a standby for the next fault.
  bool return_after = false;
};

// Every explicit class; the second NIC flap on the same machine within the
// policy's window evicts it. With 2 standbys, machine-down and device-fail
// use them up, so after the flap eviction the elastic job trains on one
// replica fewer until the demo returns the repaired device-fail machine,
// and then grows back to full width.
const Planned kSchedule[] = {
    {"crash", 0, Expect::kRecovers, "rank throws: reattempt in place from the last checkpoint"},
    {"kill", 1, Expect::kRecovers, "rank SIGKILLed: reattempt in place"},
    {"hang", 2, Expect::kRecovers, "rank stuck in a receive: no step, stacks captured and grouped, outlier's machine evicted",
     "collective", 0, true},
    {"nan", 1, Expect::kRecovers, "a GPU's gradients turn NaN: the step is held back, the machine whose local values "
     "alone were bad is evicted", "", 0, true},
    {"slow", 3, Expect::kRecovers, "machine runs 2x slow: flagged 5 rounds of 10 s running, then evicted", "", 2.0, true},
    {"machine-down", 2, Expect::kRecovers, "agent and ranks gone: evict on heartbeat loss, swap in a standby"},
    {"device-fail", 3, Expect::kRecovers, "Xid/ECC error: evict, swap in a standby"},
    {"nic-flap", 1, Expect::kTolerated, "one link flap: tolerated"},
    {"nic-flap", 1, Expect::kNarrows, "second flap within 5 min: evict; no standby left, so the job trains on fewer replicas"},
};

// The status line, rewritten in place on a terminal and printed every 5 s
// otherwise. It asks the ledger and reads rank 0's log at most once a second.
class LiveLine {
 public:
  LiveLine(Session* s, int steps) : s_(s), steps_(steps), tty_(::isatty(2)) {}

  void Phase(const std::string& p) { phase_ = p; }

  void Update(const json& st) {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_query_ > std::chrono::seconds(1)) {
      last_query_ = now;
      if (Result<json> l = s_->Ledger(); l.ok() && l->contains("cumulative")) ettr_ = (*l)["cumulative"].value("ettr", 0.0);
      const std::string m0 = Session::SlotMachine(st, 0);
      if (!m0.empty()) {
        if (auto e = LastEvent(s_->layout().rank_log(m0, 0), "step")) loss_ = e->value("loss", loss_);
      }
    }
    if (st["job"].is_null()) return;
    int standby = 0;
    for (const json& m : st["machines"]) standby += m["state"] == "standby";
    char line[300];
    std::snprintf(line, sizeof line, "step %4lld/%d  loss %5.2f  ETTR %5.1f%%  incidents %lld  standby %d  %-20s | %s",
                  static_cast<long long>(st["job"].value("last_step", int64_t{0})), steps_, loss_, 100 * ettr_,
                  static_cast<long long>(st["job"].value("incidents", int64_t{0})), standby,
                  st["job"].value("state", std::string()).c_str(), phase_.c_str());
    if (tty_) {
      std::fprintf(stderr, "\r%-150s", line);
    } else if (now - last_print_ > std::chrono::seconds(5)) {
      last_print_ = now;
      std::fprintf(stderr, "%s\n", line);
    }
  }

  // A line that stays (an event), above the live one.
  void Say(const std::string& msg) {
    if (tty_) std::fprintf(stderr, "\r%-150s\r", "");
    std::fprintf(stderr, "== %s\n", msg.c_str());
  }

 private:
  Session* s_;
  int steps_;
  bool tty_;
  std::string phase_;
  double loss_ = 0, ettr_ = 0;
  std::chrono::steady_clock::time_point last_query_{}, last_print_{};
};

// How long a stage may take, from what this host measures: the job's own
// seconds per step, measured again at every stage (the slowest seen
// counts), so a loaded host that trains slower is given longer, and a
// stage that still overruns is a failure, not the host's pace.
class Deadlines {
 public:
  void Observe(double s_per_step) { s_per_step_ = std::max(s_per_step_, s_per_step); }
  double s_per_step() const { return s_per_step_; }
  // A fault's first reaction: the hang and heartbeat timeouts, plus a few steps.
  double Detect() const { return 30 + 10 * s_per_step_; }
  // A slow machine is judged over slow_rounds rounds of slow_round, each
  // holding at least slow_min_steps of its (slowed) steps.
  double DetectSlow(double factor) const {
    const controller::PolicyConfig p;  // the demo's controller runs the defaults
    const double round = std::max(std::chrono::duration<double>(p.slow_round).count(),
                                  p.slow_min_steps * factor * s_per_step_);
    return (p.slow_rounds + 3) * round + 10 * factor * s_per_step_;
  }
  // Restarting ranks on two cores, restoring, and a few steps.
  double Recover() const { return 150 + 30 * s_per_step_; }
  std::string Why() const {
    char buf[80];
    std::snprintf(buf, sizeof buf, " (the deadline at this host's %.2f s/step)", s_per_step_);
    return buf;
  }

 private:
  double s_per_step_ = 0;
};

struct Run {
  json schedule = json::array();
};

int64_t Step(const json& s) { return s["job"].value("last_step", int64_t{0}); }

// Training moves on to step `target`; the deadline scales with the observed
// pace, and the steps' pace is observed again.
Result<json> AwaitSteps(Session& s, LiveLine& live, int64_t target, Deadlines& d) {
  const double limit = d.s_per_step() > 0 ? 60 + 4 * d.s_per_step() * std::max<int64_t>(1, target) : 240;
  const auto t0 = std::chrono::steady_clock::now();
  int64_t from = -1;
  Result<json> st = s.WaitFor("training to step " + std::to_string(target), limit,
                              [&](const json& st) {
                                if (from < 0) from = Step(st);
                                return Step(st) >= target || st["job"]["state"] == "completed";
                              },
                              [&](const json& st) { live.Update(st); });
  if (st.ok() && from >= 0 && Step(*st) - from >= 5) {
    d.Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / (Step(*st) - from));
  }
  return st;
}

int64_t Width(const json& s) { return s["job"].value("training_world_size", int64_t{0}); }
int64_t FullWidth(const json& s) { return s["job"].value("world_size", int64_t{0}); }

// The elastic answer to running out of standbys: the survivors train on,
// narrower, for `gap_steps`; then the repaired machine is handed back and
// the job grows back to full width. `st` ends at the regrown status.
Status TrainNarrowerThenGrow(Session& s, const DemoOptions& o, LiveLine& live, Deadlines& d,
                             const std::string& repaired, Run& run, Result<json>& st) {
  auto tick = [&](const json& st) { live.Update(st); };
  st = s.WaitFor("the job to train on fewer replicas", d.Recover(), [](const json& st) {
    return Width(st) > 0 && Width(st) < FullWidth(st) && st["job"]["state"] == "running";
  }, tick);
  if (!st.ok()) return st.status();
  const int64_t narrowed = Width(*st);
  live.Say("no standby left: the job trains on " + std::to_string(narrowed) + " of " +
           std::to_string(FullWidth(*st)) + " replicas, the same global batch a step");
  live.Phase("training narrower");
  st = AwaitSteps(s, live, Step(*st) + o.gap_steps, d);
  if (!st.ok()) return st.status();
  if (repaired.empty()) return Status::Internal("no repaired machine to return");
  BULWARK_RETURN_IF_ERROR(s.Return(repaired));
  run.schedule.push_back({{"at_ms", WallMs()}, {"fault", "machine return"}, {"machine", repaired},
                          {"step", Step(*st)}, {"incident", nullptr},
                          {"note", "repaired machine handed back; the job grows back onto it"}});
  live.Say("returned " + repaired + " (repaired) to the fleet; the job grows back onto it");
  live.Phase("growing back on " + repaired);
  // One machine more: full width, unless an earlier fault on the loaded
  // host had already left the job narrower (a standby not ready in time).
  st = s.WaitFor("the job to grow onto the returned machine", d.Recover(), [&](const json& st) {
    return Width(st) > narrowed && st["job"]["state"] == "running";
  }, tick);
  if (!st.ok()) return st.status();
  live.Say("back to " + std::to_string(Width(*st)) + " of " + std::to_string(FullWidth(*st)) + " replicas");
  return Status::OK();
}

Status RunSchedule(Session& s, const DemoOptions& o, LiveLine& live, Run& run) {
  auto tick = [&](const json& st) { live.Update(st); };
  live.Phase("starting " + std::to_string(o.machines) + " ranks");
  const auto t_start = std::chrono::steady_clock::now();
  Result<json> st = s.WaitFor("the job's first step", 180, [](const json& st) { return Step(st) >= 1; }, tick);
  if (!st.ok()) return st.status();
  const auto t_first = std::chrono::steady_clock::now();
  const int64_t first = Step(*st);
  Deadlines d;
  st = AwaitSteps(s, live, first + o.gap_steps, d);
  if (!st.ok()) return st.status();
  d.Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - t_first).count() /
            std::max<int64_t>(1, Step(*st) - first));
  live.Say("job started in " + std::to_string(static_cast<int>(std::chrono::duration<double>(t_first - t_start).count())) +
           " s; " + std::to_string(d.s_per_step()).substr(0, 4) + " s/step");

  std::string device_failed;  // alive after eviction: the one to hand back
  for (const Planned& p : kSchedule) {
    if ((*st)["job"]["state"] == "completed") {
      return Status::FailedPrecondition(std::string("the job completed at step ") + std::to_string(Step(*st)) +
                                        " before the " + p.fault + " fault; run with more --steps");
    }
    const std::string victim = Session::SlotMachine(*st, p.slot);
    if (victim.empty()) return Status::Internal("no machine in slot " + std::to_string(p.slot) + " to inject " + p.fault);
    const int64_t before = (*st)["job"].value("incidents", int64_t{0});
    const int64_t gen = (*st)["job"].value("generation", int64_t{0});
    if (std::string(p.fault) == "nic-flap") {
      // A flap while the link is still down from the last one is one flap.
      const cluster::EmulatedHardware hw = cluster::HardwareOf(s.layout().dir, victim);
      Result<json> up = s.WaitFor("link of " + victim + " back up", 15, [&](const json&) {
        return cluster::NicUp(hw, cluster::UnixMs());
      }, tick);
      if (!up.ok()) return up.status();
    }
    live.Say(std::string("inject ") + p.fault + " on " + victim + " at step " + std::to_string(Step(*st)) + ": " + p.why);
    int64_t sent_ms = 0;
    Result<int> sends = s.Inject(p.fault, victim, &sent_ms, p.where, p.factor);
    if (!sends.ok()) return sends.status();
    if (*sends > 1) live.Say("the agent missed the first injection command (lost on its command stream); sent again");
    json entry{{"at_ms", sent_ms}, {"fault", p.fault}, {"machine", victim}, {"step", Step(*st)}, {"incident", nullptr},
               {"sends", *sends}};
    live.Phase(std::string(p.fault) + " on " + victim);

    if (p.expect == Expect::kTolerated) {
      st = AwaitSteps(s, live, Step(*st) + o.gap_steps, d);
      if (!st.ok()) return st.status();
      const bool quiet = (*st)["job"].value("incidents", int64_t{0}) == before && (*st)["job"]["generation"] == gen;
      entry["note"] = quiet ? "tolerated: no incident, no restart" : "expected to be tolerated, but the job restarted";
      live.Say(entry["note"].get<std::string>());
      run.schedule.push_back(entry);
      continue;
    }
    Result<json> inc = s.AwaitNewIncident(before, p.factor > 0 ? d.DetectSlow(p.factor) : d.Detect(), tick);
    if (!inc.ok()) {
      return Status::Unavailable(std::string("no incident for ") + p.fault + " on " + victim + d.Why() + ": " +
                                 inc.status().message());
    }
    entry["incident"] = (*inc)["id"];
    run.schedule.push_back(entry);
    live.Say("detected in " + std::to_string(((*inc)["detected_ms"].get<int64_t>() - entry["at_ms"].get<int64_t>()) / 1000.0).substr(0, 4) +
             " s: " + (*inc)["cause"].get<std::string>());

    if (p.expect == Expect::kNarrows) {
      BULWARK_RETURN_IF_ERROR(TrainNarrowerThenGrow(s, o, live, d, device_failed, run, st));
    }
    Result<json> closed = s.AwaitClosed((*inc)["id"].get<int64_t>(), d.Recover(), tick);
    if (!closed.ok()) {
      return Status::Unavailable(std::string("the job did not recover from ") + p.fault + " on " + victim + d.Why() +
                                 ": " + closed.status().message());
    }
    if (std::string(p.fault) == "device-fail") device_failed = victim;
    if (p.return_after) {
      for (const json& m : (*closed)["evicted"]) {
        const std::string id = m.get<std::string>();
        BULWARK_RETURN_IF_ERROR(s.ReturnToStandby(id, tick));
        live.Say("returned " + id + " (repaired) to the standby pool");
      }
    }
    live.Say("recovered: " + (*closed)["resolution"].get<std::string>() + ", recover " +
             std::to_string((*closed).value("recover_s", 0.0)).substr(0, 4) + " s, lost steps " +
             (closed->contains("lost_steps") ? (*closed)["lost_steps"].dump() : "?") +
             (closed->value("restore_source", "").empty() ? "" : ", restored from " + (*closed)["restore_source"].get<std::string>()));
    st = s.StatusJson();
    if (!st.ok()) return st.status();
    live.Phase("training");
    st = AwaitSteps(s, live, Step(*st) + o.gap_steps, d);
    if (!st.ok()) return st.status();
  }
  live.Phase("training to the end");
  st = s.WaitFor("training to complete", 60 + 4 * d.s_per_step() * o.steps,
                 [](const json& st) { return st["job"]["state"] == "completed"; }, tick);
  return st.ok() ? Status::OK() : st.status();
}

Status WriteReport(const DemoOptions& o, const json& record, bool quiet) {
  // The raw record first: if rendering refuses it, it is still there to read.
  BULWARK_RETURN_IF_ERROR(WriteFileAtomic(o.out + "/report.json", record.dump(2) + "\n"));
  Result<Report> rep = RenderReport(record);
  if (!rep.ok()) return rep.status();
  BULWARK_RETURN_IF_ERROR(WriteFileAtomic(o.out + "/report.html", rep->html));
  BULWARK_RETURN_IF_ERROR(WriteFileAtomic(o.out + "/report.svg", rep->svg));
  BULWARK_RETURN_IF_ERROR(WriteFileAtomic(o.out + "/report.md", rep->markdown));
  std::ostream& out = quiet ? std::cerr : std::cout;
  out << "\nincidents\n" << IncidentTable(record["incidents"], record["schedule"]) << "\nledger\n"
      << LedgerTable(record["ledger"]) << "\nreport: " << o.out << "/report.html (timeline), report.md, report.json\n";
  return Status::OK();
}

}  // namespace

Status RunDemo(const DemoOptions& o) {
  BULWARK_RETURN_IF_ERROR(PrepareRunDir(o.exe_dir, o.data, o.out));
  const std::string dir = o.out + "/cluster", ckpt = o.out + "/ckpt";
  std::fprintf(stderr, "== bulwark demo: %d machines + %d standby train the %s model (%d steps, checkpoint every %d) "
                       "while faults are injected\n", o.machines, o.standby, o.config.c_str(), o.steps, o.ckpt_every);
  Result<std::unique_ptr<Session>> s = Session::Up(o.exe_dir, dir, o.machines, o.standby, o.json);
  if (!s.ok()) return s.status();
  Session& session = **s;
  const int64_t started = WallMs();
  BULWARK_RETURN_IF_ERROR(session.Submit(
      "demo", o.machines,
      {"--config", o.config, "--data", o.data, "--steps", std::to_string(o.steps), "--batch-size", std::to_string(o.batch),
       "--log-format", "json", "--ckpt-dir", ckpt,
       "--ckpt-every", std::to_string(o.ckpt_every), "--resume", "--threads", std::to_string(o.threads), "--dist-timeout", "10",
       "--elastic-replicas", std::to_string(o.machines)},
      {{"OMP_NUM_THREADS", std::to_string(o.threads)}}, 50, "elastic"));

  LiveLine live(&session, o.steps);
  Run run;
  const Status outcome = RunSchedule(session, o, live, run);
  live.Say(outcome.ok() ? "training completed" : "DEMO FAILED: " + outcome.message());

  // The report is written on failure too: it shows how far things got.
  Result<json> incidents = session.Incidents();
  Result<json> ledger = session.Ledger();
  Result<json> st = session.StatusJson();
  const Status down = session.Down();
  if (!incidents.ok() || !ledger.ok() || !st.ok()) {
    return outcome.ok() ? Status::Unavailable("could not read the controller's incidents and ledger at the end") : outcome;
  }
  json loss = nullptr;
  const std::string m0 = Session::SlotMachine(*st, 0);
  if (auto done = LastEvent(session.layout().rank_log(m0, 0), "done")) loss = (*done)["loss"];
  const json record{
      {"title", "bulwark demo: " + std::to_string(o.machines) + " machines train the " + o.config + " model through " +
                    std::to_string(std::size(kSchedule)) + " injected faults"},
      {"started_ms", started},
      {"ended_ms", WallMs()},
      {"setup", {{"machines", o.machines}, {"standby", o.standby}, {"config", o.config}, {"steps", o.steps},
                 {"batch_per_rank", o.batch}, {"ckpt_every", o.ckpt_every}, {"threads_per_rank", o.threads}}},
      {"schedule", run.schedule},
      {"incidents", *incidents},
      {"ledger", *ledger},
      {"outcome", {{"completed", outcome.ok()}, {"step", (*st)["job"].value("last_step", int64_t{0})}, {"loss", loss},
                   {"message", outcome.ok() ? "Every fault was recovered from." : outcome.message()}}}};
  const Status wrote = WriteReport(o, record, o.json);
  if (o.json) std::cout << record.dump(2) << "\n";
  if (!outcome.ok()) return outcome;
  if (!down.ok()) return down;
  return wrote;
}

}  // namespace bulwark::demo
