#include "controller/crash_attribution.h"

#include <algorithm>
#include <chrono>

#include "common/exit_codes.h"
#include "controller/standby_pool.h"

namespace bulwark::controller {
namespace {

bool PeerLost(const CrashRecord& c) { return IsPeerLost(c.exit_code, c.signature); }

bool SameFailure(const CrashRecord& a, const CrashRecord& b) {
  return a.signature == b.signature && a.exit_code == b.exit_code;
}

}  // namespace

// A rank that lost a peer (its collective failed) says nothing about its
// own machine or code: bulwark-train exits kExitPeerLost, other programs
// leave a connection or NCCL error in their log. It needs a restart, but
// it is never evidence, and it does not count toward a loop either: one
// machine its peers cannot reach makes every neighbour exit this way, and
// counting those exits stopped healthy jobs as crash loops (issue 40).
// A rendezvous port held by another process on the host (port_in_use:
// PyTorch's store could not listen on MASTER_PORT) is the same kind of exit:
// the controller chose the port, the next generation listens on another,
// and bulwark-train's own store exits kExitPeerLost for it already. Counted
// as a crash, it evicted a healthy machine whose in-place restart met a
// port another cluster on the host had taken (issue 39).
bool IsPeerLost(int exit_code, const std::string& signature) {
  return exit_code == kExitPeerLost || signature == "connection_reset" || signature == "nccl" ||
         signature == "port_in_use";
}

const char* CrashVerdictName(CrashVerdict v) {
  switch (v) {
    case CrashVerdict::kReattempt: return "reattempt";
    case CrashVerdict::kEvictMachine: return "evict_machine";
    case CrashVerdict::kCodeError: return "code_error";
    case CrashVerdict::kFollowsJob: return "follows_job";
    case CrashVerdict::kRepeatsHere: return "repeats_here";
    case CrashVerdict::kCrashLoop: return "crash_loop";
  }
  return "?";
}

int CrashLoopLimit(const CrashRules& rules, Duration elapsed) {
  const double days = std::max<double>(0, elapsed.count()) / (86400.0 * 1000.0);
  const double p = std::min(1.0, rules.daily_failure_rate * days);
  Result<int> chance = BinomialQuantile(std::max(rules.machines, 0), p, rules.crash_loop_quantile);
  return rules.max_crashes_without_progress + (chance.ok() ? *chance : 0);
}

CrashAttribution AttributeCrash(const CrashRecord& crash, const std::vector<CrashRecord>& earlier,
                                bool recurs_here, Duration since_progress, const CrashRules& rules) {
  CrashAttribution a;
  a.loop_limit = CrashLoopLimit(rules, since_progress);
  const bool user_code = rules.user_code_signatures.count(crash.signature) != 0;
  const bool peer_lost = PeerLost(crash);
  bool user_code_again = false;
  const CrashRecord* same_elsewhere = nullptr;  // the same signature on another machine
  const CrashRecord* same_step = nullptr;       // the same failure at the same step, an earlier generation
  for (const CrashRecord& c : earlier) {
    if (PeerLost(c)) continue;
    // A step the job has never completed is the same place however many
    // steps each restart redid before it: a failure there that is the job's
    // (a bug at step 2, a bad batch) crashes every generation at it, after
    // steps that count as progress (the first step after a restart bumps
    // the epoch). Counted apart, it evicted every machine of the job one by
    // one and then waited for machines forever (a script that exits 1
    // after its first step, under `bulwark run`).
    // Only a program's own error exit: a process killed by a signal (exit
    // code 0 here; an injected kill, the OOM killer) says little about the
    // step it was killed at, and two such at one step are chance.
    const bool this_epoch = c.progress_epoch == crash.progress_epoch;
    const bool never_past = crash.site != kStartup && crash.furthest < crash.site && crash.exit_code != 0;
    if (!this_epoch && !never_past) continue;
    if (this_epoch) ++a.since_progress;
    if (peer_lost) continue;
    if (this_epoch && user_code && c.signature == crash.signature) user_code_again = true;
    if (this_epoch && !crash.signature.empty() && c.signature == crash.signature && c.machine != crash.machine) {
      same_elsewhere = &c;
    }
    if (crash.site != kStartup && c.site == crash.site && c.generation < crash.generation && SameFailure(c, crash)) {
      // Another machine's occurrence is the stronger evidence: keep it.
      if (same_step == nullptr || same_step->machine == crash.machine) same_step = &c;
    }
  }
  const std::string at_step = "at step " + std::to_string(crash.site);
  if (user_code_again) {
    a.verdict = CrashVerdict::kCodeError;
    a.why = "'" + crash.signature + "' again without a completed step";
  } else if (same_elsewhere != nullptr) {
    a.verdict = CrashVerdict::kFollowsJob;
    a.other = same_elsewhere->machine;
    a.why = "'" + crash.signature + "' on " + a.other + " and " + crash.machine;
  } else if (same_step != nullptr && same_step->machine != crash.machine) {
    a.verdict = CrashVerdict::kFollowsJob;
    a.other = same_step->machine;
    a.why = "the same failure " + at_step + " on " + a.other + " and then on " + crash.machine;
  } else if (same_step != nullptr) {
    a.verdict = CrashVerdict::kRepeatsHere;
    a.why = "the same failure " + at_step + " on " + crash.machine + " after a restart";
  } else if (!peer_lost && a.since_progress + 1 >= a.loop_limit) {
    a.verdict = CrashVerdict::kCrashLoop;
    a.why = std::to_string(a.since_progress + 1) + " crashes without a completed step (chance explains fewer than " +
            std::to_string(a.loop_limit) + ")";
  } else if (recurs_here && !peer_lost && !user_code) {
    a.verdict = CrashVerdict::kEvictMachine;
    a.why = crash.machine + "'s ranks crashed again";
  } else {
    a.verdict = CrashVerdict::kReattempt;
    a.why = crash.signature == "port_in_use" ? "another process on " + crash.machine + " holds the rendezvous port"
            : peer_lost                       ? "a rank on " + crash.machine + " lost a peer"
                                              : "no machine indicated, first crash on " + crash.machine;
  }
  return a;
}

}  // namespace bulwark::controller
