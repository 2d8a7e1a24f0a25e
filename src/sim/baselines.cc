#include "sim/baselines.h"

#include <algorithm>
#include <cmath>

#include "controller/ledger.h"
#include "sim/fault_stream.h"

namespace bulwark::sim {
namespace {

using controller::TimeCategory;

// Detection of each class without bulwark's inspections and detectors.
double DetectDelay(const Costs& k, FaultClass c) {
  switch (c) {
    case FaultClass::kGpu: return k.detect_gpu;
    case FaultClass::kHbm: return k.detect_hbm;
    case FaultClass::kSoftware: return k.detect_software;
    case FaultClass::kSdc: return k.step + k.detect_sdc;  // the trainer stops on a NaN loss
    case FaultClass::kNetwork:
    case FaultClass::kHost: return k.baseline_timeout;
    case FaultClass::kHang: return k.baseline_watchdog;
    case FaultClass::kFailSlow:
    case FaultClass::kNicFlap: return 0;
  }
  return 0;
}

// Faults the baselines do not act on: a flap heals, and a slow machine is
// never noticed (its slowness is not in any arm's ledger).
bool Ignored(FaultClass c) { return c == FaultClass::kNicFlap || c == FaultClass::kFailSlow; }

bool NeedsMachine(FaultClass c) {
  return c != FaultClass::kSoftware && c != FaultClass::kHang && !Ignored(c);
}

}  // namespace

double ClosedFormEttr(double failures_per_second, double u0, double dt, double w) {
  return (1.0 - failures_per_second * (u0 + dt / 2.0)) / (1.0 + w / dt);
}

ArmResult RunBaseline(const SimConfig& c, Baseline which) {
  const Costs& k = c.costs;
  ArmResult a;
  a.name = which == Baseline::kRequeue ? "requeue" : "torchelastic";
  const double horizon = c.days * 86400.0;
  // The whole world's restart, priced as bulwark's (SimConfig::WorldRestart),
  // with a durable restore.
  SimConfig::Price p = c.WorldRestart(c.machines());
  p.restore = k.restore_durable;
  const double restart = p.Total();
  double& detection = a.by_category[static_cast<int>(TimeCategory::kDetection)];
  double& recovery = a.by_category[static_cast<int>(TimeCategory::kRecovery)];
  double& manual = a.by_category[static_cast<int>(TimeCategory::kManual)];
  double& startup = a.by_category[static_cast<int>(TimeCategory::kStartup)];

  // The job progresses from `resume` on, starting at training time `base`
  // (a checkpoint); `high` is the furthest it ever got.
  double resume = restart, base = 0, high = 0;
  startup = restart;
  double longest = restart, stretch_from = 0;
  FaultStream stream(c);
  while (std::optional<Fault> f = stream.Next()) {
    if (!f->manual && Ignored(f->cls)) continue;
    ++a.faults;
    const double at = f->at;
    double cost;
    double detect = 0, get_machines = 0;
    // The wall this fault adds: a fault during a recovery starts it over,
    // so only what lies beyond the recovery under way (and before the
    // horizon) is new; each category gets its share of that.
    auto added = [&](double c) {
      const double end = std::min(horizon, std::max(resume, at + c));
      return c > 0 ? std::max(0.0, end - std::max(resume, at)) / c : 0.0;
    };
    if (f->manual) {
      // A planned restart saves first, so nothing is lost; it pays a restart.
      cost = restart;
      if (at > resume) {
        base += at - resume;
        high = std::max(high, base);
      }
      manual += cost * added(cost);
    } else {
      detect = DetectDelay(k, f->cls);
      if (which == Baseline::kRequeue) get_machines = k.requeue;
      else if (NeedsMachine(f->cls)) get_machines = k.reschedule;
      cost = detect + get_machines + restart;
      if (at > resume) {
        const double progress = base + (at - resume);
        high = std::max(high, progress);
        base = std::floor(progress / k.durable_interval) * k.durable_interval;
      }
      const double share = added(cost);
      detection += detect * share;
      recovery += (get_machines + restart) * share;
    }
    // A fault during a recovery starts it over (the restart fails), and
    // the unproductive stretch goes on.
    if (at >= resume) stretch_from = at;
    resume = std::max(resume, at + cost);
    longest = std::max(longest, std::min(resume, horizon) - stretch_from);
    if (resume >= horizon) break;
  }
  if (horizon > resume) high = std::max(high, base + (horizon - resume));
  a.wall = horizon;
  // What the recovery sums count twice when faults overlap is taken back
  // out of recomputation; productive is exact.
  const double productive = std::min(high, horizon);
  a.by_category[static_cast<int>(TimeCategory::kProductive)] = productive;
  double other = 0;
  for (int i = 1; i < controller::kNumTimeCategories; ++i) other += a.by_category[i];
  a.by_category[static_cast<int>(TimeCategory::kRecomputation)] = std::max(0.0, horizon - productive - other);
  a.ettr = productive / horizon;
  // Training time includes a blocking write every interval.
  a.checkpoint_stall = productive * k.durable_write / (k.durable_interval + k.durable_write);
  a.ettr_with_stalls = (productive - a.checkpoint_stall) / horizon;
  a.longest_unproductive = longest;
  return a;
}

}  // namespace bulwark::sim
