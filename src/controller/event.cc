#include "controller/event.h"

namespace bulwark::controller {
namespace {

template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <class... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

}  // namespace

const char* InspectionKindName(InspectionKind k) {
  switch (k) {
    case InspectionKind::kDevice: return "device";
    case InspectionKind::kDisk: return "disk";
    case InspectionKind::kMemory: return "memory";
    case InspectionKind::kProcess: return "process";
  }
  return "unknown";
}

const char* EventKindName(EventKind k) {
  static constexpr const char* kNames[kNumEventKinds] = {
      "rank_exited",   "machine_heartbeat_lost", "inspection_failed",
      "network_alert", "machine_joined",         "step_completed",
      "checkpoint_saved", "operator_returned",   "manual_restart",
      "checkpoint_restored", "hang_suspected",     "fail_slow_suspected",
      "training_anomaly",    "stacks_analyzed",     "diagnostics_reported",
      "ladder_deadline",     "release_created",     "rollback_requested",
      "release_due",         "requeue_due",         "alignment_check_due",
      "release_staged",      "stage_due",           "standby_ready",
  };
  int i = static_cast<int>(k);
  return i >= 0 && i < kNumEventKinds ? kNames[i] : "unknown";
}

Time ObservedAt(const Event& e) {
  return std::visit([](const auto& x) { return x.observed; }, e);
}

std::optional<Time> FaultTimeOf(const Event& e) {
  if (const auto* x = std::get_if<RankExited>(&e)) return x->observed;
  if (const auto* x = std::get_if<MachineHeartbeatLost>(&e)) return x->last_heartbeat;
  if (const auto* x = std::get_if<NetworkAlert>(&e)) return x->observed;
  // A hang began when progress stopped.
  if (const auto* x = std::get_if<HangSuspected>(&e)) return x->since;
  if (const auto* x = std::get_if<TrainingAnomaly>(&e)) return x->at;
  return std::nullopt;
}

std::string Describe(const Event& e) {
  return std::visit(
      Overloaded{
          [](const RankExited& x) {
            std::string s = "rank " + std::to_string(x.rank) + " on " + x.machine;
            s += x.signal != 0 ? " killed by signal " + std::to_string(x.signal)
                               : " exited with code " + std::to_string(x.exit_code);
            if (!x.log_signature.empty()) s += " (" + x.log_signature + ")";
            if (!x.unreachable_addr.empty()) s += ": could not reach its peer at " + x.unreachable_addr;
            return s;
          },
          [](const MachineHeartbeatLost& x) {
            // A duration, not a time: the plane's clock is wall time, the
            // simulator's is virtual, and only the difference means the same.
            return "machine " + x.machine + " lost its heartbeat (silent for " +
                   FormatDuration(x.observed - x.last_heartbeat) + ")";
          },
          [](const InspectionFailed& x) {
            std::string s = std::string(InspectionKindName(x.kind)) + " inspection failed on " + x.machine;
            return x.detail.empty() ? s : s + ": " + x.detail;
          },
          [](const NetworkAlert& x) {
            std::string s = "network alert on " + x.machine;
            return x.detail.empty() ? s : s + ": " + x.detail;
          },
          [](const MachineJoined& x) {
            std::string s = "machine " + x.machine + " joined, self-check " +
                            (x.self_check_passed ? "passed" : "failed");
            return x.detail.empty() ? s : s + ": " + x.detail;
          },
          [](const StepCompleted& x) { return "step " + std::to_string(x.step) + " completed"; },
          [](const CheckpointSaved& x) { return "checkpoint of step " + std::to_string(x.step) + " saved"; },
          [](const OperatorReturned& x) { return "operator returned machine " + x.machine; },
          [](const ManualRestart& x) { return "manual restart: " + x.reason; },
          [](const CheckpointRestored& x) {
            std::string s = "restored checkpoint of step " + std::to_string(x.step) + " from " +
                            (x.source.empty() ? "an unnamed source" : x.source) + " in " +
                            std::to_string(static_cast<int64_t>(x.restore_ms)) + " ms";
            return x.newest_step > x.step ? s + " (newest held: step " + std::to_string(x.newest_step) + ")" : s;
          },
          [](const HangSuspected& x) {
            return std::string(x.first_step ? "no first step" : "no step after step " + std::to_string(x.last_step)) +
                   " for " + FormatDuration(x.observed - x.since) + " (allowance " + FormatDuration(x.allowance) +
                   "): hang suspected";
          },
          [](const FailSlowSuspected& x) {
            return x.machine.empty() ? x.detail : "fail-slow " + x.machine + ": " + x.detail;
          },
          [](const TrainingAnomaly& x) { return x.detail; },
          [](const DiagnosticsReported& x) {
            int failed = 0;
            for (const DiagnosticResult& r : x.results) failed += r.passed ? 0 : 1;
            const std::string of = x.check != 0 ? "periodic bitwise check " + std::to_string(x.check)
                                                : "incident " + std::to_string(x.incident);
            return "diagnostics from " + x.machine + " for " + of + ": " +
                   std::to_string(x.results.size()) + " test(s), " + std::to_string(failed) + " failed";
          },
          [](const LadderDeadline& x) {
            return "the ladder's budget for incident " + std::to_string(x.incident) + " ran out";
          },
          [](const ReleaseCreated& x) {
            std::string s = "release " + std::to_string(x.release) + " created, applied " +
                            (x.now ? "now" : "at the next restart");
            return x.why.empty() ? s : s + ": " + x.why;
          },
          [](const RollbackRequested& x) {
            std::string s = "rollback to release " + std::to_string(x.to) + " requested";
            return x.why.empty() ? s : s + ": " + x.why;
          },
          [](const ReleaseDue& x) {
            return "release " + std::to_string(x.release) + " waited too long for a restart: forcing it";
          },
          [](const RequeueDue&) { return std::string("the requeued job's machines are provisioned"); },
          [](const AlignmentCheckDue&) { return std::string("the periodic bitwise check is due"); },
          [](const ReleaseStaged& x) {
            return x.machine + (x.ready ? " staged" : " cannot stage") + " release " + std::to_string(x.release) +
                   (x.detail.empty() ? "" : ": " + x.detail);
          },
          [](const StageDue& x) {
            return "staging release " + std::to_string(x.release) + " ran out of time: restarting without it";
          },
          [](const StandbyReady& x) {
            return "standby " + x.machine + (x.warm ? " holds spares of the job" : " has no spares of the job") +
                   (x.detail.empty() ? "" : ": " + x.detail);
          },
          [](const StacksAnalyzed& x) {
            return "stacks of incident " + std::to_string(x.incident) + ": " + std::to_string(x.groups.size()) +
                   " group(s); " + x.why;
          },
      },
      e);
}

}  // namespace bulwark::controller
