// Crash attribution: is a crash that names no machine the job's own failure,
// the machine's, or an independent fault?
//
// At 12,500 machines a job sees a fault about every 35 minutes and a restart
// takes about five, so unrelated crashes often land inside one restart.
// Counting every crash without progress toward a "crash loop" stopped
// healthy jobs in the simulator (a year at 100,000 GPUs: stopped as
// "deterministic" on day 2). So a crash counts against the job's code only
// on evidence that the same failure recurs:
//   - the same non-empty log signature on another machine since the last
//     progress (an import error, an exception in the job's own code), or
//   - the same failure (signature and exit code) at the same training step
//     in a later generation: the ranks restored and failed at the very step
//     that failed before. On another machine that is proof (the failure
//     followed the job); on the same machine it could be either, which is
//     what the stop-time ladder's diagnostics tell apart.
// Different failures on different machines are separate incidents. A run of
// them still ends, but only when chance cannot explain it: more crashes
// without progress than the fleet's own failure rate makes likely in that
// time (the crash_loop_quantile of Binomial(machines, daily rate x elapsed)),
// on top of max_crashes_without_progress. Peer-lost exits (IsPeerLost) are
// echoes of some machine's fault: they never count toward that bound. A small job keeps today's bound
// of 3; a 12,500-machine job tolerates a few more before calling it a loop.
// Pure: the policy (policy.cc) and the table test (crash_attribution_test)
// drive it.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "controller/machine.h"
#include "controller/time.h"

namespace bulwark::controller {

// Where in the job a crash happened: the training step the ranks were
// running, or kStartup before the generation's ranks restored their state
// (process start, rendezvous, restore).
constexpr int64_t kStartup = -1;

// Whether an exit says a rank lost a peer (bulwark-train's kExitPeerLost,
// or a connection or NCCL error in the log): the echo of another machine's
// fault, never evidence against the job or the rank's own machine, and
// never counted toward a crash loop.
bool IsPeerLost(int exit_code, const std::string& signature);

// A crash of a rank that named no machine (no hardware signature).
struct CrashRecord {
  Time at{};
  MachineId machine;
  std::string signature;
  int64_t progress_epoch = 0;  // ClusterState::progress_epoch when it happened
  int exit_code = 1;
  int64_t site = kStartup;     // the step it failed, or kStartup
  int64_t generation = 0;      // the placement generation it failed in
  // The furthest step the job had ever completed when it happened: a site
  // beyond it is a step no generation got past.
  int64_t furthest = 0;
};

enum class CrashVerdict {
  kReattempt,      // an independent fault: restart in place on the same machines
  kEvictMachine,   // the machine crashed again within the window, differently: it is suspect
  kCodeError,      // a user-code signature seen before: the job's code or command, stop
  kFollowsJob,     // the same failure on another machine: the job's code or data, stop
  kRepeatsHere,    // the same failure at the same step on the same machine: machine or job?
  kCrashLoop,      // more crashes without progress than chance explains
};
const char* CrashVerdictName(CrashVerdict v);

struct CrashAttribution {
  CrashVerdict verdict = CrashVerdict::kReattempt;
  MachineId other;        // kFollowsJob: where the same failure happened before
  int since_progress = 0; // crashes without progress before this one, peer-lost exits not counted
  int loop_limit = 0;     // crashes without progress that make a loop
  std::string why;        // one clause for the incident
};

struct CrashRules {
  std::set<std::string> user_code_signatures;
  int max_crashes_without_progress = 3;
  // Chance: machines in the job, their daily failure rate, and how sure the
  // loop verdict must be that chance alone did not produce the crashes.
  int machines = 0;
  double daily_failure_rate = 0;
  double crash_loop_quantile = 0.999;
};

// The crashes that make a loop when `elapsed` has passed since the last
// progress: max_crashes_without_progress plus the crashes chance explains.
int CrashLoopLimit(const CrashRules& rules, Duration elapsed);

// Attributes `crash`, given the crashes since the last progress within the
// crash window (`earlier`, oldest first, not including `crash`), whether its
// machine crashed within the window before (`recurs_here`), and the time
// since the last progress.
CrashAttribution AttributeCrash(const CrashRecord& crash, const std::vector<CrashRecord>& earlier,
                                bool recurs_here, Duration since_progress, const CrashRules& rules);

}  // namespace bulwark::controller
