// bulwark sim: the controller's own policy on a simulated fleet for months,
// beside two baselines on the same fault trace.
//
//   SimConfig c;                       // defaults: 9,600 GPUs, 90 days, Llama 3 faults
//   Result<SimResult> r = Simulate(c);
//   std::cout << FormatText(c, *r);
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "sim/config.h"
#include "sim/result.h"

namespace bulwark::sim {

// The bulwark arm (for an elastic job, then the same job restarted whole
// at every fault: SimConfig::compare_whole_world), then requeue and
// torchelastic, all on the same fault trace.
Result<SimResult> Simulate(const SimConfig& config);
// The arm of that name ("requeue", "torchelastic", "bulwark elastic",
// "bulwark whole-world"); an empty arm when there is none.
const ArmResult& Arm(const SimResult& r, const std::string& name);

// The tables a person reads; JSON for scripts (cpu time only with `timing`,
// so that a run's JSON is a pure function of its config); an HTML page with
// an SVG timeline of the bulwark arm's ledger.
std::string FormatText(const SimConfig& config, const SimResult& r);
nlohmann::json ToJson(const SimConfig& config, const SimResult& r, bool timing);
std::string RenderHtml(const SimConfig& config, const SimResult& r);

// Sweeps: "scale" (1k -> 100k GPUs), "standby" (pool quantile vs an oracle
// with unlimited standbys), "ckpt" (durable checkpoint interval with
// in-memory checkpoints off), "detect" (the detection thresholds, one at a
// time). One row per point; InvalidArgument for an
// unknown sweep.
Result<std::string> Sweep(const SimConfig& base, const std::string& which);

// The demo's fault schedule (docs/demo.md) on its 4 machines + 2 standbys,
// with costs measured locally (bench-recovery, the demo's step time).
SimConfig DemoReplay();

}  // namespace bulwark::sim
