// Stop-time diagnostics (docs/ladder.md): the tests a machine runs when the
// controller's ladder asks (RunDiagnostics), each real code with a budget.
//
//   compute    a fixed GEMM (96x96 doubles holding small integers, so every
//              product and sum is exact and the answer does not depend on
//              the compiler or the summation order) repeated to a fixed
//              amount of work; its result hash must equal the known answer,
//              and its time (this thread's CPU time: wall time on a shared
//              host measures the scheduler) goes to the controller, which
//              fails a machine at compute_slow_ratio x the fleet's median
//   device     the (emulated) device's health, as the inspector reads it
//   network    `bulwark-train --net-check` with each neighbour in turn (the
//              links the controller assigned): a timed Gloo all-reduce of
//              4 MB and of one float; the controller compares the links
//   alignment  `<the job's trainer argv> --align`: one fixed step of the
//              job's architecture (trainer/diag/align.h); the controller compares
//              the hash with the other machines'
//
// The agent runs them on a thread of its own while the ranks are stopped.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "agent/inspector.h"

namespace bulwark::agent {

struct TestOutcome {
  std::string test;
  bool passed = false;
  std::string detail;
  double ms = 0;
};

// One dual-phase replay group, as this machine takes part in it.
struct ReplayGroup {
  std::string group;  // "h0", "v1"
  int rank = 0, world = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  // A pipeline job (pp > 1): a vertical group replays the job's PP layout,
  // a horizontal one (stage >= 0) that stage's share of the layers.
  int pp = 1, stage = -1;
};

struct DiagnosticsRequest {
  std::vector<std::string> tests;
  std::chrono::milliseconds budget{60000};
  // The job's command line (the last START_RANKS argv); empty: no alignment
  // reference is known, and the alignment test fails saying so.
  std::vector<std::string> trainer_argv;
  InspectorPaths health;
  // tests = {"replay"}: the groups to replay in, in order (horizontal first);
  // with "network", the links ("net<i>") to measure, in order.
  std::vector<ReplayGroup> replay;
  int replay_steps = 5;
  // The network test's program: bulwark-train beside the agent's binary
  // (any job's links can be measured, not only bulwark-train's).
  std::string net_check_binary;
};

// The command the alignment and replay tests run `--align` on: the job's
// own when it is bulwark-train's (its model, rebuilt outside the job), else
// bulwark-train's tiny model at `trainer` (a Python job's model cannot be
// rebuilt outside it; a machine's arithmetic that drifts shows in any
// model). Empty when neither is known. `beside`: the periodic check, run
// beside the job's ranks, takes the tiny model of the job's own
// bulwark-train on the job's --device, so that it never competes with the
// ranks for the memory of the host or the GPU.
std::vector<std::string> AlignmentArgv(const std::vector<std::string>& job_argv, const std::string& trainer,
                                       bool beside = false);

// The bulwark-train a job of another program is checked with:
// $BULWARK_ALIGN_TRAINER when the agent's environment names one (a CUDA
// build on a GPU machine, scripts/gpu-build.sh, so that a PyTorch job's
// check runs on its GPUs), else `beside_agent`, the one installed beside
// the agent's binary.
std::string AlignmentTrainer(const std::string& beside_agent);

struct DiagnosticsOutcome {
  std::vector<TestOutcome> results;
  std::string alignment_hash;
};

// The GEMM check. `corrupt`: one element of the result is wrong, as on a
// machine with a broken ALU (RunDiagnostics: the emulated ALU says so).
TestOutcome ComputeCheck(bool corrupt = false);
// The known answer's hash, for the record.
const char* ComputeCheckAnswer();
TestOutcome DeviceCheck(const InspectorPaths& paths);
// Runs the alignment step; `hash` is its 16-hex-digit hash when it made
// one. Passed when it did, unless the machine's GPUs disagreed among
// themselves (the hash is then set too, and the detail names the GPU).
// `sdc_file`: the machine's emulated matmul corruption (InspectorPaths::sdc,
// "" none), which the run reads as the ranks do (BULWARK_SDC_FILE).
TestOutcome AlignmentCheck(const std::vector<std::string>& trainer_argv, const std::string& sdc_file,
                           std::chrono::milliseconds budget, std::string* hash);
// This machine's part in one replay group: `<trainer argv> --align
// --align-steps S` as rank `rank` of the group. The group's rank 0 gets the
// outcome "replay/<group>": passed when the replayed steps stayed finite,
// the detail holding the hash; other ranks' outcome only says they ran.
TestOutcome ReplayCheck(const std::vector<std::string>& trainer_argv, const std::string& sdc_file,
                        const ReplayGroup& g, int steps, std::chrono::milliseconds budget);
// This machine's end of one network link: `<binary> --net-check` as rank
// `rank` of 2. The link's rank 0 gets "network/<link>" with the timed
// collectives' ms (what the controller compares) and the bandwidth and
// latency in the detail; rank 1 gets "network-part/<link>", reported only
// when it failed. A NIC that reads "down" fails at once; an emulated link
// that is degraded slows the check's transfers.
TestOutcome NetworkCheck(const std::string& binary, const ReplayGroup& link, const InspectorPaths& health,
                         std::chrono::milliseconds budget);
bool IsNetworkLink(const std::string& group);
// Every requested test, in order, within the budget (what is left of it
// goes to the next test; a test that gets none fails "no time left").
DiagnosticsOutcome RunDiagnostics(const DiagnosticsRequest& req);

}  // namespace bulwark::agent
