// Events: what agents, monitors and operators report to the controller.
//
// Each event carries the time it was observed (on the virtual clock); the
// controller is told separately when it handles it (`now`), and the gap is
// part of detection time. Events are facts, never commands: the policy may
// ignore a late or duplicate one.
//
// Adding a kind (hangs, slowdowns, NaN losses are next): add a struct, append
// it to Event and EventKind in the same position, give it a name in
// event.cc, and give it a rule in policy.cc's table. static_asserts keep the
// three lists in step.
//
// Each struct lists its fields once, in Fields(s, v): v(name, s.field) for
// each, with the name the journal writes, or v.Optional(name, s.field) for
// one that journal rows written before it existed lack (it decodes to its
// default). The journal's codec (plane/codec.cc) encodes and decodes every
// kind by walking this list, so adding a field is one line here; the
// round-trip test (tests/unit/event_codec_test.cc) fails for a member the list
// leaves out.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>

#include <vector>

#include "controller/job.h"
#include "controller/ladder.h"
#include "controller/machine.h"
#include "controller/time.h"

namespace bulwark::controller {

// A rank process ended. exit_code 0 with no signal is a clean exit; anything
// else is a crash. log_signature is what the agent's log matcher found in
// the rank's last output: "cuda_error", "xid", "ecc", "oom", "nccl",
// "nccl_hardware", "connection_reset", "segfault", "exception", or empty.
// unreachable_addr is the peer address ("host:port") the rank's last output
// says it could not connect to, and unreachable the machine that advertised
// that host, resolved when the report came in (empty when no one machine
// did): a peer-lost exit that names it blames that machine (policy.cc).
struct RankExited {
  MachineId machine;
  RankId rank = 0;
  int exit_code = 0;
  int signal = 0;
  std::string log_signature;
  Time observed{};
  MachineId unreachable;
  std::string unreachable_addr;

  template <class S, class V>
  static void Fields(S& s, V& v) {
    v.Optional("machine", s.machine);
    v("rank", s.rank);
    v("exit_code", s.exit_code);
    v("signal", s.signal);
    v("signature", s.log_signature);
    v("observed", s.observed);
    v.Optional("unreachable", s.unreachable);
    v.Optional("unreachable_addr", s.unreachable_addr);
  }
};

// The machine's agent stopped sending heartbeats: the machine is down, or cut
// off, which for a training job is the same thing.
struct MachineHeartbeatLost {
  MachineId machine;
  Time last_heartbeat{};  // when it was last heard from: the fault time
  Time observed{};

  template <class S, class V>
  static void Fields(S& s, V& v) {
    v.Optional("machine", s.machine);
    v("last_heartbeat", s.last_heartbeat);
    v("observed", s.observed);
  }
};

enum class InspectionKind { kDevice, kDisk, kMemory, kProcess };
const char* InspectionKindName(InspectionKind k);

// A real-time inspection on the machine failed (GPU lost, disk read-only,
// host memory errors, training process in a bad state).
struct InspectionFailed {
  MachineId machine;
  InspectionKind kind = InspectionKind::kDevice;
  std::string detail;
  Time observed{};

  template <class S, class V>
  static void Fields(S& s, V& v) {
    v.Optional("machine", s.machine);
    v("inspection", s.kind);
    v("detail", s.detail);
    v("observed", s.observed);
  }
};

// A NIC went down or flapped. Flaps usually heal on their own.
struct NetworkAlert {
  MachineId machine;
  std::string detail;
  Time observed{};

  template <class S, class V>
  static void Fields(S& s, V& v) {
    v.Optional("machine", s.machine);
    v("detail", s.detail);
    v("observed", s.observed);
  }
};

// A machine registered and ran its self-check (image, libraries, devices).
struct MachineJoined {
  MachineId machine;
  bool self_check_passed = false;
  std::string detail;
  Time observed{};
  // Its failure domain (the rack or switch it hangs under, "r1"), as the
  // agent's registration says; empty: none known (the machine keeps any
  // domain it had). The plane must carry it from the agent's registration.
  std::string domain;

  template <class S, class V>
  static void Fields(S& s, V& v) {
    v.Optional("machine", s.machine);
    v("passed", s.self_check_passed);
    v("detail", s.detail);
    v("observed", s.observed);
    v.Optional("domain", s.domain);
  }
};

// The job finished training step `step` (steps count from 1; a job restored
// from the checkpoint of step k completes k+1 next).
struct StepCompleted {
  int64_t step = 0;
  Time observed{};

  template <class S, class V>
  static void Fields(S& s, V& v) {
    v("step", s.step);
    v("observed", s.observed);
  }
};

// A complete checkpoint of step `step` was written (in memory or on disk).
struct CheckpointSaved {
  int64_t step = 0;
  Time observed{};

  template <class S, class V>
  static void Fields(S& s, V& v) {
    v("step", s.step);
    v("observed", s.observed);
  }
};

// The restarted ranks restored the checkpoint of `step` (rank 0's agent
// reports it once every rank has). `source` is where the slowest rank's
// shard came from ("memory", "peer", "durable", "disk"); `newest_step` is
// the newest step any source still held, i.e. the progress the fault left
// behind, which the ranks know better than the controller's lagging step
// reports; `restore_ms` is the slowest rank's restore.
struct CheckpointRestored {
  int64_t step = 0;
  std::string source;
  int64_t newest_step = 0;
  double restore_ms = 0;
  Time observed{};

  template <class S, class V>
  static void Fields(S& s, V& v) {
    v("step", s.step);
    v("source", s.source);
    v("newest_step", s.newest_step);
    v("restore_ms", s.restore_ms);
    v("observed", s.observed);
  }
};

// An operator repaired an evicted machine and hands it back; it must pass a
// self-check (MachineJoined) before it serves again.
struct OperatorReturned {
  MachineId machine;
  Time observed{};

  template <class S, class V>
  static void Fields(S& s, V& v) {
    v.Optional("machine", s.machine);
    v("observed", s.observed);
  }
};

// An operator asked for a restart (a code fix, a config change).
struct ManualRestart {
  std::string reason;
  Time observed{};

  template <class S, class V>
  static void Fields(S& s, V& v) {
    v("reason", s.reason);
    v("observed", s.observed);
  }
};

// --- implicit faults: made by the detectors from the ranks' signals ---

// No step completed within the allowance (hang_detector.h). `since`: the
// last progress, taken as the fault time.
struct HangSuspected {
  int64_t last_step = 0;
  Time since{};
  Duration allowance{0};
  bool first_step = false;  // the ranks never completed a step since their start
  Time observed{};

  template <class S, class V>
  static void Fields(S& s, V& v) {
    v("last_step", s.last_step);
    v("since", s.since);
    v("allowance_ms", s.allowance);
    v("first_step", s.first_step);
    v("observed", s.observed);
  }
};

// fail_slow_detector.h: `machine` computed `ratio` times slower than its
// peers for `rounds` rounds running; empty machine: a job-wide slowdown.
struct FailSlowSuspected {
  MachineId machine;  // empty: job-wide
  int rounds = 0;
  double ratio = 0;
  std::string detail;
  Time observed{};
  bool network = false;  // job-wide steps slowed while compute held: measure the links

  template <class S, class V>
  static void Fields(S& s, V& v) {
    v.Optional("machine", s.machine);
    v("rounds", s.rounds);
    v("ratio", s.ratio);
    v("detail", s.detail);
    v("observed", s.observed);
    v.Optional("network", s.network);
  }
};

// anomaly_detector.h: a non-finite ("nan") or spiking ("spike") step.
// `culprits`: machines whose ranks' local values alone were bad; empty when
// none stands out. `halted`: the ranks held the step back, so the newest
// checkpoint predates it.
struct TrainingAnomaly {
  int64_t step = 0;
  std::string kind;
  std::vector<MachineId> culprits;
  std::vector<int> culprit_ranks;
  int reports = 0;
  bool halted = false;
  std::string detail;
  Time at{};  // when the first rank reported the step: the fault time
  Time observed{};

  template <class S, class V>
  static void Fields(S& s, V& v) {
    v("step", s.step);
    v("anomaly", s.kind);
    v("culprits", s.culprits);
    v("culprit_ranks", s.culprit_ranks);
    v("reports", s.reports);
    v("halted", s.halted);
    v("detail", s.detail);
    v("at", s.at);
    v("observed", s.observed);
  }
};

// The Runtime Analyzer's verdict on the stacks captured for an incident
// (stack_analyzer.h), as the policy needs it: the machines to over-evict
// (empty: nobody stands out) and a summary of the groups for the record.
struct StackGroupSummary {
  int count = 0;
  std::string stack;  // representative normalized frames, innermost first
  std::vector<int> ranks;
};
struct StacksAnalyzed {
  int64_t incident = 0;
  // The placement generation the stacks were captured in: a verdict on a
  // generation since restarted (another fault's eviction answered the
  // incident first) describes ranks that no longer run.
  int64_t generation = 0;
  std::vector<StackGroupSummary> groups;
  std::vector<int> missing;  // ranks with no stack
  std::string group;         // the chosen parallel group, "" for none
  std::vector<MachineId> suspects;
  std::string why;
  Time observed{};

  template <class S, class V>
  static void Fields(S& s, V& v) {
    v("incident", s.incident);
    v.Optional("generation", s.generation);
    v("groups", s.groups);
    v("missing", s.missing);
    v("group", s.group);
    v("suspects", s.suspects);
    v("why", s.why);
    v("observed", s.observed);
  }
};

// --- the stop-time ladder (ladder.h) ---

// One machine's answer to RunDiagnostics for `incident`: every test's
// result and, when the alignment test ran, the hash of its result. A
// replay group's result comes the same way, from the group's first
// machine, as tests named "replay/h<i>" and "replay/v<j>".
struct DiagnosticsReported {
  int64_t incident = 0;
  MachineId machine;
  std::vector<DiagnosticResult> results;
  std::string alignment_hash;
  Time observed{};
  // The periodic bitwise check this answers (AlignCheckState), 0 for the
  // ladder's diagnostics and a checkup's (`incident` names theirs).
  int64_t check = 0;

  template <class S, class V>
  static void Fields(S& s, V& v) {
    v("incident", s.incident);
    v.Optional("machine", s.machine);
    v("results", s.results);
    v("alignment_hash", s.alignment_hash);
    v("observed", s.observed);
    v.Optional("check", s.check);
  }
};

// The budget of the ladder's rung in flight for `incident` ran out (the
// plane sends it from its tick; LadderStatus::deadline says when).
struct LadderDeadline {
  int64_t incident = 0;
  Time observed{};

  template <class S, class V>
  static void Fields(S& s, V& v) {
    v("incident", s.incident);
    v("observed", s.observed);
  }
};

// --- releases and recovery modes (releases.h) ---

// An operator created release `release` of the job's code and settings
// (`bulwark update`): applied at the next restart, or at once with `now`.
struct ReleaseCreated {
  int release = 0;
  bool now = false;
  std::string why;
  Time observed{};

  template <class S, class V>
  static void Fields(S& s, V& v) {
    v("release", s.release);
    v("now", s.now);
    v("why", s.why);
    v("observed", s.observed);
  }
};

// An operator asked to go back to release `to` (`bulwark rollback`).
struct RollbackRequested {
  int to = 0;
  std::string why;
  Time observed{};

  template <class S, class V>
  static void Fields(S& s, V& v) {
    v("to", s.to);
    v("why", s.why);
    v("observed", s.observed);
  }
};

// A lazy release has waited PolicyConfig::update_force_after for a restart
// that did not come (the plane sends it from its tick).
struct ReleaseDue {
  int release = 0;
  Time observed{};

  template <class S, class V>
  static void Fields(S& s, V& v) {
    v("release", s.release);
    v("observed", s.observed);
  }
};

// Machine `machine` holds processes of release `release` set up and waiting
// to take its ranks (agent/handoff.h: a staged release), or, with `ready`
// false, says why it cannot (`detail`: a program that does not speak the
// handoff protocol, a process that failed to set up).
struct ReleaseStaged {
  MachineId machine;
  int release = 0;
  bool ready = false;
  std::string detail;
  Time observed{};

  template <class S, class V>
  static void Fields(S& s, V& v) {
    v("machine", s.machine);
    v("release", s.release);
    v("ready", s.ready);
    v("detail", s.detail);
    v("observed", s.observed);
  }
};

// Standby `machine` holds spare processes of the running job set up and
// waiting for an ASSIGN (plane/actuator.h: WarmStandby), or, with `warm`
// false, says it will not (`detail`: a program that does not speak the
// handoff protocol, spares that failed to set up). An elastic job grows
// onto a standby only once it said so (reconcile.h), so the replicas that
// train do not wait for the joiner's process start.
struct StandbyReady {
  MachineId machine;
  bool warm = false;
  std::string detail;
  Time observed{};

  template <class S, class V>
  static void Fields(S& s, V& v) {
    v("machine", s.machine);
    v("warm", s.warm);
    v("detail", s.detail);
    v("observed", s.observed);
  }
};

// An urgent release's staging ran past PolicyConfig::release_stage_timeout
// (the plane sends it from its tick; ReleaseState::stage_deadline).
struct StageDue {
  int release = 0;
  Time observed{};

  template <class S, class V>
  static void Fields(S& s, V& v) {
    v("release", s.release);
    v("observed", s.observed);
  }
};

// A requeued job's modeled provisioning delay ran out (the plane sends it
// from its tick; ClusterState::requeue_until says when).
struct RequeueDue {
  Time observed{};

  template <class S, class V>
  static void Fields(S& s, V& v) {
    v("observed", s.observed);
  }
};

// The periodic bitwise check (LadderConfig::align_every) is due, or the
// one in flight has run out of time: the plane sends it from its tick when
// AlignmentCheckIsDue (policy.h) says so.
struct AlignmentCheckDue {
  Time observed{};

  template <class S, class V>
  static void Fields(S& s, V& v) {
    v("observed", s.observed);
  }
};

using Event = std::variant<RankExited, MachineHeartbeatLost, InspectionFailed, NetworkAlert,
                           MachineJoined, StepCompleted, CheckpointSaved, OperatorReturned,
                           ManualRestart, CheckpointRestored, HangSuspected, FailSlowSuspected,
                           TrainingAnomaly, StacksAnalyzed, DiagnosticsReported, LadderDeadline,
                           ReleaseCreated, RollbackRequested, ReleaseDue, RequeueDue, AlignmentCheckDue,
                           ReleaseStaged, StageDue, StandbyReady>;

// One value per alternative of Event, in the same order.
enum class EventKind {
  kRankExited,
  kMachineHeartbeatLost,
  kInspectionFailed,
  kNetworkAlert,
  kMachineJoined,
  kStepCompleted,
  kCheckpointSaved,
  kOperatorReturned,
  kManualRestart,
  kCheckpointRestored,
  kHangSuspected,
  kFailSlowSuspected,
  kTrainingAnomaly,
  kStacksAnalyzed,
  kDiagnosticsReported,
  kLadderDeadline,
  kReleaseCreated,
  kRollbackRequested,
  kReleaseDue,
  kRequeueDue,
  kAlignmentCheckDue,
  kReleaseStaged,
  kStageDue,
  kStandbyReady,
};
constexpr int kNumEventKinds = 24;
static_assert(std::variant_size_v<Event> == kNumEventKinds, "Event and EventKind must match");

inline EventKind KindOf(const Event& e) { return static_cast<EventKind>(e.index()); }
const char* EventKindName(EventKind k);
Time ObservedAt(const Event& e);
// When the fault itself happened, where the event tells: a rank's exit time,
// a machine's last heartbeat. Empty when only the observation time is known
// (a failed inspection found a device that broke at some unknown earlier time).
std::optional<Time> FaultTimeOf(const Event& e);
// One line for logs and incident causes: "rank 5 on m02 exited with code 1 (exception)".
std::string Describe(const Event& e);

}  // namespace bulwark::controller
