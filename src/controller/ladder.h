// The stop-time diagnostics ladder (ByteRobust §2.4): what the controller
// does with a fault no rank or machine can be blamed for. Cheapest rung
// first; each rung that cannot settle the fault hands it to the next.
//
//   diagnose   targeted tests on every machine of the job, in parallel, each
//              with a budget (compute check, device health, pairwise network
//              links, bitwise alignment); failing machines are evicted and
//              the job restarts
//   reattempt  every machine passed: restart in place (a transient fault)
//   rollback   it fails again: roll back to the previous release; there are
//              no releases yet, so the rung records "no earlier release"
//   replay     dual-phase replay (Algorithm 1): the machine at the
//              intersection of a failing horizontal and a failing vertical
//              group is evicted; nothing found -> the job stops
//
// Pure: the state lives in ClusterState::ladder, the rules in policy.cc
// call the functions here, and time comes in as arguments. The transition
// table below is the only way the ladder's state changes.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "controller/machine.h"
#include "controller/time.h"

namespace bulwark::controller {

// ---------------------------------------------------------------------------
// Configuration (PolicyConfig::ladder)

struct LadderConfig {
  // The rungs to climb, in this order; a rung left out is skipped. Empty:
  // no ladder (a no-culprit anomaly that repeats stops the job, as before).
  std::vector<std::string> rungs = {"diagnose", "reattempt", "rollback", "replay"};
  // The tests of the diagnose rung, run on every machine in parallel:
  // compute, device, network, alignment. "network" is opt-in (it costs a
  // process start per link, and a bad link is usually named by the NIC
  // inspection before the ladder is needed).
  std::vector<std::string> tests = {"compute", "device", "alignment"};
  // Each machine's whole test run must answer within this; a machine that
  // does not is failed ("no answer within ...").
  Duration diagnose_budget = std::chrono::seconds(60);
  // Every replay group must report within this.
  Duration replay_budget = std::chrono::minutes(5);
  // A machine whose compute check took this many times the fleet's median
  // fails it (a slow device is as bad as a wrong one in lock-step training).
  double compute_slow_ratio = 2.0;
  // A network link (a pairwise all-reduce between neighbouring machines)
  // whose timed collectives took this many times the reference link's fails
  // (NetworkLinks, JudgeDiagnostics). Higher than the compute ratio: links
  // on a shared host share its scheduler, and a link is measured by two
  // processes, not one thread's CPU time.
  double net_slow_ratio = 3.0;
  // After a restart decided by the ladder, this many steps past the step
  // that triggered it must complete before the ladder calls the fault
  // settled; a fault before that "fails again" and climbs on.
  int settle_steps = 5;
  // Algorithm 1's k: m = k*PP horizontal and n = DP/k vertical groups; 0
  // picks the smallest k that gives at least 2x2 groups.
  int replay_k = 0;
  // The periodic bitwise check: every this long the alignment test runs on
  // every machine beside its ranks (policy_align.cc), so that a machine
  // that drifts silently (no NaN, no spike, no incident) is still found.
  // Zero: off (the default).
  Duration align_every{0};

  // One-line InvalidArgument naming the bad rung, test or budget.
  Status Validate() const;
};

// The ladder's settings as `bulwark up` takes them: `rungs` and `tests`
// comma-separated ("none": an empty list), `budget_s` the diagnose budget
// in seconds; an empty string keeps the default. Parsed into `config`,
// then validated: a one-line InvalidArgument for anything wrong.
Status ApplyLadderFlags(const std::string& rungs, const std::string& tests, const std::string& budget_s,
                        LadderConfig* config);
// `bulwark up --ladder-align-every SECONDS` (0: off; "" keeps the default).
Status ApplyLadderAlignEvery(const std::string& seconds, LadderConfig* config);

// ---------------------------------------------------------------------------
// States and the transition table

// kIdle: no ladder in progress.
// kDiagnosing: RunDiagnostics sent; waiting for every machine or the budget.
// kWatching: the ladder restarted the job (after an eviction, a reattempt
//   or a replay) and watches whether the fault comes back before
//   settle_steps steps past the trigger; back to kIdle when it does not.
// kReplaying: replay groups running; waiting for every group or the budget.
// There is no terminal state: a ladder that runs out of rungs stops the job
// and goes back to kIdle (the job's own kStopped is terminal).
enum class LadderState { kIdle, kDiagnosing, kWatching, kReplaying };
constexpr int kNumLadderStates = 4;
const char* LadderStateName(LadderState s);

// What moves the ladder: the rung the policy climbs next, or the end.
// Rollback is instantaneous (it has no state of its own): the rule records
// it and climbs on in the same decision.
enum class LadderInput {
  kDiagnose,   // send RunDiagnostics to every machine of the job
  kRestart,    // restart (evicted machines replaced, or in place) and watch
  kReplay,     // start the dual-phase replay
  kSettled,    // settle_steps steps past the trigger: the fault is gone
  kExhausted,  // no rung left, or the job stopped: back to idle
};
const char* LadderInputName(LadderInput i);

struct LadderTransition {
  LadderState from;
  LadderInput on;
  LadderState to;
};

// The table, and the budget each state waits at most (zero: no time limit;
// kWatching is bounded by steps, not time).
const std::vector<LadderTransition>& LadderTable();
Duration LadderBudget(LadderState s, const LadderConfig& config);
// The state `on` leads to from `from`; FailedPrecondition naming both and
// the input for a transition the table does not have.
Result<LadderState> LadderNext(LadderState from, LadderInput on);

// ---------------------------------------------------------------------------
// Diagnostics results and the verdict on them

struct DiagnosticResult {
  std::string test;  // "compute", "device", "alignment", "replay/h0", ...
  bool passed = false;
  std::string detail;
  double ms = 0;
};

// Per machine: its results and its alignment hash ("" when it ran none).
struct MachineDiagnostics {
  std::vector<DiagnosticResult> results;
  std::string alignment_hash;
};

struct DiagnosticsVerdict {
  std::map<MachineId, std::string> failed;  // machine -> why, for the incident
  std::string why;                          // one line for the incident
  bool inconclusive = false;                // too many failed to believe the tests
};

// The network test's links: machine i and its neighbour i+1 in slot order,
// closing the ring when there are more than two ("net0", "net1", ...; none
// for one machine). Each machine is in two links (one when there are two
// machines), so one bad machine shows as two slow links that share it,
// and one bad cable as one.
using NetworkLinkMap = std::map<std::string, std::vector<MachineId>>;
NetworkLinkMap NetworkLinks(const std::vector<MachineId>& machines);
// "net10" -> 10; -1 for a name that is not a link's.
int NetworkLinkIndex(const std::string& name);
// The round link `index` of `links` runs in. Every agent runs its links in
// one global order, (round, index), which is deadlock-free whatever the
// order (the first unfinished link in it always has both ends free), and
// the rounds make it fast: the even links share no machine and run at
// once, then the odd ones; in a ring of odd size the closing link shares a
// machine with net0 and runs alone, third. Two or three links' time
// whatever the ring's size, where index order chained every link behind
// the one before it (26 s for a ring of four here, docs/ladder.md).
int NetworkLinkRound(int index, int links);

// Judges one diagnose rung: a failed or missing test, a compute time at
// least `compute_slow_ratio` x the median of all machines' compute times, an
// alignment hash that differs from a strict majority's, or no answer at all
// (a machine in `machines` absent from `reports`) fails the machine. Half
// the job or more failing (in a job of more than one machine) says the test
// or its environment, not the machines: inconclusive, nobody evicted.
//
// Network results ("network/<link>" from the link's first machine,
// "network-part/<link>" when the second could not take part) judge links,
// not the machine that reported them: a link fails when it failed or its
// time is at least `net_slow_ratio` x the reference (the lower median of
// the passed links' times: with one bad machine in a ring of 4, two of the
// four links are slow, and the plain median would be half slow). A machine
// on two failing links, or on all of its links, fails; a failing link that
// touches no such machine fails both its ends (a bad cable: fast isolation
// over precise localization).
DiagnosticsVerdict JudgeDiagnostics(const std::vector<MachineId>& machines,
                                    const std::map<MachineId, MachineDiagnostics>& reports,
                                    const LadderConfig& config, const std::string& budget_note,
                                    const NetworkLinkMap& links = {});
// The alignment hash a strict majority of `counts` (hash -> machines that
// computed it) holds; "" when none does. The ladder's diagnose rung and the
// periodic bitwise check (policy_align.cc) judge by it.
std::string StrictMajority(const std::map<std::string, int>& counts);
// The same with each machine's answer found already (answers[i] is
// machines[i]'s, null for none), as the ladder keeps them, by position;
// `reports` (every answer, by machine) is read only to judge `links`.
DiagnosticsVerdict JudgeAnswers(const std::vector<MachineId>& machines,
                                const std::vector<const MachineDiagnostics*>& answers,
                                const std::map<MachineId, MachineDiagnostics>& reports, const LadderConfig& config,
                                const std::string& budget_note, const NetworkLinkMap& links);

// ---------------------------------------------------------------------------
// Dual-phase replay (ByteRobust Algorithm 1)

// Machines are numbered by slot, pipeline-major as Megatron places them when
// a machine holds one stage's tensor-parallel ranks: slot = dp + DP * pp.
// Horizontal group i (m = k*PP of them) holds DP/k consecutive replicas of
// one stage, replayed with the layer count shrunk to that stage's layers;
// vertical group j (n = DP/k of them) holds k replicas of every stage, the
// job's own PP layout with DP shrunk to k. Each machine is in exactly one
// group of each phase, and a horizontal and a vertical group share exactly
// one machine, so one faulty machine is named by the pair that fails.
struct ReplayPlan {
  int pp = 1, dp = 1, k = 1;
  std::vector<std::vector<int>> horizontal;  // slots, m groups
  std::vector<std::vector<int>> vertical;    // slots, n groups
};
// InvalidArgument when machines % pp != 0, k < 0, or DP % k != 0; k = 0
// picks the smallest k dividing DP with k*PP >= 2 and DP/k >= 2 (none: k=1).
Result<ReplayPlan> PlanReplay(int machines, int pp, int k);
// The slot at the intersection of the failing groups, or nullopt when the
// failures do not name exactly one machine (none failed, only one phase
// failed, or several did: more than one bad machine, which Algorithm 1
// assumes away).
std::optional<int> ReplayCulprit(const ReplayPlan& plan, const std::vector<int>& failed_horizontal,
                                 const std::vector<int>& failed_vertical);

// ---------------------------------------------------------------------------
// The ladder's state (ClusterState::ladder)

struct LadderStatus {
  LadderState state = LadderState::kIdle;
  int rung = -1;                  // index into config.rungs of the rung climbed last
  std::string trigger;            // what started it, for the incident
  int64_t trigger_step = 0;       // the step the fault hit (or the last completed one)
  int64_t incident = 0;           // the incident of the rung in flight
  std::optional<Time> deadline;   // kDiagnosing, kReplaying
  std::vector<MachineId> machines;                      // asked to run diagnostics
  // Their answers so far, by position in machines (answered[i]: answers[i]
  // is machines[i]'s): kept in a map by id, a round's 12,500 answers were
  // a fifth of a simulated year's time.
  std::vector<MachineDiagnostics> answers;
  std::vector<char> answered;
  size_t answers_in = 0;                                // how many machines answered
  size_t answered_prefix = 0;  // machines[0..this) answered or left the job
  // Each asked machine's status, by position (ladder_rules.cc): a round of
  // 12,500 answers looks at the next machine once per answer, and a hash
  // lookup each was a tenth of a simulated year's time. Pointers into
  // ClusterState::machines, whose nodes never move or go; a copy starts
  // empty and is found again at its first use, as MachineIndex is.
  struct StatusRefs {
    StatusRefs() = default;
    StatusRefs(const StatusRefs&) {}
    StatusRefs& operator=(const StatusRefs&) {
      of.clear();
      return *this;
    }
    StatusRefs(StatusRefs&&) = default;
    StatusRefs& operator=(StatusRefs&&) = default;
    std::vector<const MachineStatus*> of;
  } status;
  std::map<std::string, bool> replay_results;           // "h0" / "v1" -> passed
  NetworkLinkMap links;           // the network test's links, when it runs
  bool reattempted = false;       // the reattempt rung is spent (or came before the ladder)
  bool periodic = false;          // a routine check, not a fault: the links of a slowed job
  std::string check = "network check";  // which routine check, for the incident
  // Sets state to LadderNext(state, on).
  Status Move(LadderInput on);
};

}  // namespace bulwark::controller
