#include "sim/sim.h"

#include <cstdarg>
#include <cstdio>
#include <functional>
#include <thread>
#include <vector>

#include "controller/standby_pool.h"
#include "sim/baselines.h"
#include "sim/fleet_sim.h"

namespace bulwark::sim {

Result<SimResult> Simulate(const SimConfig& c) {
  SimResult r;
  // The same job, seed and fault trace, restarted whole at every fault:
  // run beside the elastic arm on a thread of its own (the two runs share
  // nothing; the controller's core keeps no global state), so that the
  // comparison costs no wall time on a host with two cores.
  const bool compare = c.script.empty() && c.Elastic() && c.compare_whole_world;
  SimConfig world = c;
  world.recovery = SimConfig::Recovery::kWholeWorld;
  SimResult w;
  Status world_status;
  std::thread world_run;
  if (compare) world_run = std::thread([&] { world_status = RunBulwark(world, w); });
  Status st = RunBulwark(c, r);
  if (world_run.joinable()) world_run.join();
  BULWARK_RETURN_IF_ERROR(st);
  if (!c.script.empty()) return r;  // a replay: the baselines model random traces only
  if (compare) {
    BULWARK_RETURN_IF_ERROR(world_status);
    r.arms.push_back(w.arms[0]);
    r.whole_world.push_back(std::move(w.fleet));
  }
  r.arms.push_back(RunBaseline(c, Baseline::kRequeue));
  r.arms.push_back(RunBaseline(c, Baseline::kTorchElastic));
  return r;
}

const ArmResult& Arm(const SimResult& r, const std::string& name) {
  for (const ArmResult& a : r.arms) {
    if (a.name == name) return a;
  }
  static const ArmResult none{};
  return none;
}

namespace {

std::string Row(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string Row(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

}  // namespace

Result<std::string> Sweep(const SimConfig& base, const std::string& which) {
  std::string out;
  if (which == "scale") {
    out += Row("%8s %8s %8s %9s %9s %9s %8s %8s %9s\n", "gpus", "machines", "standby", "bulwark", "requeue",
               "elastic", "faults", "events", "events/s");
    for (int gpus : {1024, 4096, 9600, 16384, 32768, 65536, 100352}) {
      SimConfig c = base;
      c.compare_whole_world = false;
      c.gpus = gpus;
      c.pp = 16;
      FitPipeline(c);
      Result<SimResult> r = Simulate(c);
      if (!r.ok()) return r.status();
      out += Row("%8d %8d %8d %8.2f%% %8.2f%% %8.2f%% %8lld %8lld %9.0f\n", gpus, c.machines(),
                 r->fleet.initial_standbys, 100 * r->arms[0].ettr, 100 * Arm(*r, "requeue").ettr, 100 * Arm(*r, "torchelastic").ettr,
                 static_cast<long long>(r->arms[0].faults), static_cast<long long>(r->fleet.events),
                 r->fleet.events / std::max(1e-9, r->cpu_seconds));
    }
  } else if (which == "standby") {
    out += Row("%-12s %8s %9s %8s %8s %10s %10s\n", "pool", "standby", "ETTR", "waits", "waiting", "requested",
               "vs oracle");
    SimConfig oracle = base;
    oracle.compare_whole_world = false;
    oracle.oracle_standbys = true;
    Result<SimResult> o = Simulate(oracle);
    if (!o.ok()) return o.status();
    const double best = o->arms[0].ettr;
    for (double q : {0.0, 0.5, 0.9, 0.99, 0.999}) {
      SimConfig c = base;
      c.compare_whole_world = false;
      if (q == 0.0) {
        c.initial_standbys = 0;
        c.policy.daily_failure_rate = 0;  // no target: every eviction waits for provisioning
      } else {
        c.policy.standby_quantile = q;
      }
      Result<SimResult> r = Simulate(c);
      if (!r.ok()) return r.status();
      const double waiting = r->arms[0].by_category[static_cast<int>(controller::TimeCategory::kWaiting)];
      out += Row("%-12s %8d %8.3f%% %8lld %7.0fs %10lld %9.3f%%\n", q == 0 ? "none" : Row("P%g", 100 * q).c_str(),
                 r->fleet.initial_standbys, 100 * r->arms[0].ettr, static_cast<long long>(r->fleet.waits), waiting,
                 static_cast<long long>(r->fleet.standbys_requested), 100 * (best - r->arms[0].ettr) / best);
    }
    out += Row("%-12s %8s %8.3f%%\n", "oracle", "inf", 100 * best);
  } else if (which == "ckpt") {
    out += Row("%10s %12s %12s %12s %12s\n", "interval", "durable-only", "closed form", "requeue", "elastic");
    for (double minutes : {5.0, 10.0, 30.0, 60.0, 120.0}) {
      SimConfig c = base;
      c.compare_whole_world = false;
      c.costs.durable_interval = minutes * 60;
      c.costs.memory_checkpoints = false;
      Result<SimResult> r = Simulate(c);
      if (!r.ok()) return r.status();
      double rate = 0;
      for (int i = 0; i < kNumFaultClasses; ++i) {
        if (i != static_cast<int>(FaultClass::kNicFlap)) rate += c.rates.per_machine_day[i] * c.machines();
      }
      const double u0 = r->fleet.mean_detect + r->fleet.mean_recover;
      const double cf = ClosedFormEttr(rate / 86400.0, u0, c.costs.durable_interval, c.costs.durable_write);
      out += Row("%8.0f m %11.2f%% %11.2f%% %11.2f%% %11.2f%%\n", minutes, 100 * r->arms[0].ettr_with_stalls,
                 100 * cf, 100 * Arm(*r, "requeue").ettr_with_stalls, 100 * Arm(*r, "torchelastic").ettr_with_stalls);
    }
  } else if (which == "detect") {
    // The detection thresholds, one at a time from the defaults: what a
    // stricter or laxer policy costs in time and in healthy machines.
    out += Row("%-28s %9s %8s %9s %9s\n", "threshold", "ETTR", "evicted", "healthy", "incidents");
    struct Knob {
      std::string name;
      std::function<void(SimConfig&)> set;
    };
    std::vector<Knob> knobs;
    for (int n : {1, 2, 3}) {
      knobs.push_back({"network_alerts_to_evict " + std::to_string(n),
                       [n](SimConfig& c) { c.policy.network_alerts_to_evict = n; }});
    }
    for (double f : {2.0, 5.0, 10.0}) {
      knobs.push_back({Row("hang_factor %g", f), [f](SimConfig& c) { c.policy.hang_factor = f; }});
    }
    for (double t : {2.0, 10.0, 60.0}) {
      knobs.push_back({Row("heartbeat_timeout %g s", t), [t](SimConfig& c) { c.costs.heartbeat_timeout = t; }});
    }
    for (const Knob& k : knobs) {
      SimConfig c = base;
      c.compare_whole_world = false;
      k.set(c);
      Result<SimResult> r = Simulate(c);
      if (!r.ok()) return r.status();
      out += Row("%-28s %8.3f%% %8lld %9lld %9lld\n", k.name.c_str(), 100 * r->arms[0].ettr,
                 static_cast<long long>(r->fleet.evicted), static_cast<long long>(r->fleet.healthy_evicted),
                 static_cast<long long>(r->fleet.incident_count));
    }
  } else {
    return Status::InvalidArgument("--sweep: unknown sweep '" + which + "'; use scale, standby, ckpt or detect");
  }
  return out;
}

SimConfig DemoReplay() {
  SimConfig c;
  // The demo measured whole-world restarts (its job is not elastic yet).
  c.recovery = SimConfig::Recovery::kWholeWorld;
  // 4 machines x 1 rank (data parallel) + 2 standbys, 450 steps (docs/demo.md).
  c.gpus = 4;
  c.gpus_per_machine = 1;
  c.tp = 1;
  c.pp = 1;
  c.initial_standbys = 2;
  c.provisioning = false;  // the local cluster has no machines to add
  c.days = 1;
  c.total_steps = 450;
  // The demo hands hang, NaN and slow machines back once the job recovered,
  // and the device-fail machine when the job waits for one.
  c.returned_classes = {FaultClass::kHang, FaultClass::kSdc, FaultClass::kFailSlow, FaultClass::kGpu};
  c.return_after = 6.5;
  // Faults 15 steps of training apart: #1-#5 at the steps the demo's run
  // prints; the demo waits for each incident to end, so #6-#9 follow the
  // slow machine's 50 s of detection (~140 steps) at the same spacing.
  c.script = {{16, FaultClass::kSoftware, 0}, {32, FaultClass::kSoftware, 1}, {48, FaultClass::kHang, 2},
              {65, FaultClass::kSdc, 1},      {83, FaultClass::kFailSlow, 3}, {240, FaultClass::kHost, 2},
              {255, FaultClass::kGpu, 3},     {270, FaultClass::kNicFlap, 1}, {285, FaultClass::kNicFlap, 1}};
  Costs& k = c.costs;
  k.step = 0.36;  // 163.7 s productive over 450 steps
  // bench-recovery medians (docs/demo.md): detection per class ...
  k.detect_software = 0.18;
  k.detect_gpu = 0.58;
  k.heartbeat_timeout = 1.98;
  k.nic_alert_interval = 0.97;
  k.detect_sdc = 0.58 - 0.36 > 0 ? 0.58 - 0.36 : 0;
  k.stack_capture = 1.0;  // assumed: well inside the 3 s trace deadline
  k.sdc_shows_locally = true;  // the demo injects a NaN into one machine's own gradients
  k.diagnose = 0.5;            // docs/ladder.md: the diagnose rung's median, tiny model
  k.replay = 16.6;             // docs/ladder.md: the replay rung's median
  // ... and where a restart's seconds go: spawn 0.45, rendezvous ~1 (in
  // some restarts), data + init + checkpoint load ~0.05, then one step.
  k.process_start = 0.45;
  k.comm_init_base = 1.0;
  k.restore_memory = 0.05;
  k.memory_block_per_step = 0;  // inside the measured step time
  return c;
}

}  // namespace bulwark::sim
