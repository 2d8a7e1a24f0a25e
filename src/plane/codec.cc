#include "plane/codec.h"

#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

namespace bulwark::plane {
namespace {

using nlohmann::json;

int64_t Ms(Time t) { return ToMs(t); }
double Seconds(Duration d) { return static_cast<double>(d.count()) / 1000.0; }

InspectionKind InspectionFromName(const std::string& s, bool* ok) {
  *ok = true;
  for (InspectionKind k : {InspectionKind::kDevice, InspectionKind::kDisk, InspectionKind::kMemory,
                           InspectionKind::kProcess}) {
    if (s == InspectionKindName(k)) return k;
  }
  *ok = false;
  return InspectionKind::kDevice;
}

// Whether `v` converts to the integer type T exactly. nlohmann converts a
// float such as 3e84 to int by a cast, which is undefined behaviour (found by
// fuzz/journal_fuzz.cc: fuzz/corpus/journal/crash-float-as-int.jsonl).
template <typename T>
bool FitsInteger(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max());
  if (!v.is_number_integer()) return false;
  const int64_t x = v.get<int64_t>();
  return x >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
         (x < 0 || static_cast<uint64_t>(x) <= static_cast<uint64_t>(std::numeric_limits<T>::max()));
}
template <typename T>
bool Fits(const json& v) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    return FitsInteger<T>(v);
  } else if constexpr (std::is_same_v<T, std::vector<int>>) {
    if (!v.is_array()) return false;
    for (const json& x : v) {
      if (!FitsInteger<int>(x)) return false;
    }
  }
  return true;  // other types: nlohmann's own checks throw type_error
}

// A field of `j` as T, or InvalidArgument naming it.
template <typename T>
Status Get(const json& j, const char* field, T* out) {
  auto it = j.find(field);
  if (it == j.end()) return Status::InvalidArgument(std::string("journal record lacks field '") + field + "'");
  if (!Fits<T>(*it)) {
    return Status::InvalidArgument(std::string("journal record field '") + field + "': not an integer in range");
  }
  try {
    *out = it->get<T>();
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("journal record field '") + field + "': " + e.what());
  }
  return Status::OK();
}

}  // namespace

json EncodeEvent(const Event& e) {
  json j;
  j["kind"] = EventKindName(KindOf(e));
  j["observed"] = Ms(ObservedAt(e));
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, RankExited>) {
          j["machine"] = x.machine;
          j["rank"] = x.rank;
          j["exit_code"] = x.exit_code;
          j["signal"] = x.signal;
          j["signature"] = x.log_signature;
        } else if constexpr (std::is_same_v<T, MachineHeartbeatLost>) {
          j["machine"] = x.machine;
          j["last_heartbeat"] = Ms(x.last_heartbeat);
        } else if constexpr (std::is_same_v<T, InspectionFailed>) {
          j["machine"] = x.machine;
          j["inspection"] = InspectionKindName(x.kind);
          j["detail"] = x.detail;
        } else if constexpr (std::is_same_v<T, NetworkAlert>) {
          j["machine"] = x.machine;
          j["detail"] = x.detail;
        } else if constexpr (std::is_same_v<T, MachineJoined>) {
          j["machine"] = x.machine;
          j["passed"] = x.self_check_passed;
          j["detail"] = x.detail;
        } else if constexpr (std::is_same_v<T, StepCompleted> || std::is_same_v<T, CheckpointSaved>) {
          j["step"] = x.step;
        } else if constexpr (std::is_same_v<T, OperatorReturned>) {
          j["machine"] = x.machine;
        } else if constexpr (std::is_same_v<T, ManualRestart>) {
          j["reason"] = x.reason;
        } else if constexpr (std::is_same_v<T, CheckpointRestored>) {
          j["step"] = x.step;
          j["source"] = x.source;
          j["newest_step"] = x.newest_step;
          j["restore_ms"] = x.restore_ms;
        } else if constexpr (std::is_same_v<T, HangSuspected>) {
          j["last_step"] = x.last_step;
          j["since"] = Ms(x.since);
          j["allowance_ms"] = ToMs(x.allowance);
          j["first_step"] = x.first_step;
        } else if constexpr (std::is_same_v<T, FailSlowSuspected>) {
          j["machine"] = x.machine;
          j["rounds"] = x.rounds;
          j["ratio"] = x.ratio;
          j["detail"] = x.detail;
        } else if constexpr (std::is_same_v<T, TrainingAnomaly>) {
          j["step"] = x.step;
          j["anomaly"] = x.kind;
          j["culprits"] = x.culprits;
          j["culprit_ranks"] = x.culprit_ranks;
          j["reports"] = x.reports;
          j["halted"] = x.halted;
          j["detail"] = x.detail;
          j["at"] = Ms(x.at);
        } else if constexpr (std::is_same_v<T, StacksAnalyzed>) {
          j["incident"] = x.incident;
          j["generation"] = x.generation;
          j["groups"] = StackGroupsJson(x.groups);
          j["missing"] = x.missing;
          j["group"] = x.group;
          j["suspects"] = x.suspects;
          j["why"] = x.why;
        } else if constexpr (std::is_same_v<T, DiagnosticsReported>) {
          j["incident"] = x.incident;
          j["machine"] = x.machine;
          j["alignment_hash"] = x.alignment_hash;
          json results = json::array();
          for (const DiagnosticResult& r : x.results) {
            results.push_back({{"test", r.test}, {"passed", r.passed}, {"detail", r.detail}, {"ms", r.ms}});
          }
          j["results"] = std::move(results);
        } else if constexpr (std::is_same_v<T, LadderDeadline>) {
          j["incident"] = x.incident;
        } else if constexpr (std::is_same_v<T, ReleaseCreated>) {
          j["release"] = x.release;
          j["now"] = x.now;
          j["why"] = x.why;
        } else if constexpr (std::is_same_v<T, RollbackRequested>) {
          j["to"] = x.to;
          j["why"] = x.why;
        } else if constexpr (std::is_same_v<T, ReleaseDue>) {
          j["release"] = x.release;
        } else if constexpr (std::is_same_v<T, ReleaseStaged>) {
          j["machine"] = x.machine;
          j["release"] = x.release;
          j["ready"] = x.ready;
          j["detail"] = x.detail;
        } else if constexpr (std::is_same_v<T, StageDue>) {
          j["release"] = x.release;
        }
      },
      e);
  return j;
}

json StackGroupsJson(const std::vector<StackGroupSummary>& groups) {
  json a = json::array();
  for (const StackGroupSummary& g : groups) a.push_back({{"count", g.count}, {"stack", g.stack}, {"ranks", g.ranks}});
  return a;
}

Result<Event> DecodeEvent(const json& j) {
  std::string kind;
  int64_t observed_ms = 0;
  BULWARK_RETURN_IF_ERROR(Get(j, "kind", &kind));
  BULWARK_RETURN_IF_ERROR(Get(j, "observed", &observed_ms));
  const Time observed = TimeFromMs(observed_ms);
  std::string machine;
  if (j.contains("machine")) BULWARK_RETURN_IF_ERROR(Get(j, "machine", &machine));

  if (kind == EventKindName(EventKind::kRankExited)) {
    RankExited x{machine, 0, 0, 0, "", observed};
    BULWARK_RETURN_IF_ERROR(Get(j, "rank", &x.rank));
    BULWARK_RETURN_IF_ERROR(Get(j, "exit_code", &x.exit_code));
    BULWARK_RETURN_IF_ERROR(Get(j, "signal", &x.signal));
    BULWARK_RETURN_IF_ERROR(Get(j, "signature", &x.log_signature));
    return Event(x);
  }
  if (kind == EventKindName(EventKind::kMachineHeartbeatLost)) {
    int64_t last = 0;
    BULWARK_RETURN_IF_ERROR(Get(j, "last_heartbeat", &last));
    return Event(MachineHeartbeatLost{machine, TimeFromMs(last), observed});
  }
  if (kind == EventKindName(EventKind::kInspectionFailed)) {
    std::string name, detail;
    BULWARK_RETURN_IF_ERROR(Get(j, "inspection", &name));
    BULWARK_RETURN_IF_ERROR(Get(j, "detail", &detail));
    bool ok = false;
    InspectionKind k = InspectionFromName(name, &ok);
    if (!ok) return Status::InvalidArgument("journal record field 'inspection': unknown kind '" + name + "'");
    return Event(InspectionFailed{machine, k, detail, observed});
  }
  if (kind == EventKindName(EventKind::kNetworkAlert)) {
    std::string detail;
    BULWARK_RETURN_IF_ERROR(Get(j, "detail", &detail));
    return Event(NetworkAlert{machine, detail, observed});
  }
  if (kind == EventKindName(EventKind::kMachineJoined)) {
    MachineJoined x{machine, false, "", observed};
    BULWARK_RETURN_IF_ERROR(Get(j, "passed", &x.self_check_passed));
    BULWARK_RETURN_IF_ERROR(Get(j, "detail", &x.detail));
    return Event(x);
  }
  if (kind == EventKindName(EventKind::kStepCompleted) || kind == EventKindName(EventKind::kCheckpointSaved)) {
    int64_t step = 0;
    BULWARK_RETURN_IF_ERROR(Get(j, "step", &step));
    if (kind == EventKindName(EventKind::kStepCompleted)) return Event(StepCompleted{step, observed});
    return Event(CheckpointSaved{step, observed});
  }
  if (kind == EventKindName(EventKind::kOperatorReturned)) return Event(OperatorReturned{machine, observed});
  if (kind == EventKindName(EventKind::kManualRestart)) {
    std::string reason;
    BULWARK_RETURN_IF_ERROR(Get(j, "reason", &reason));
    return Event(ManualRestart{reason, observed});
  }
  if (kind == EventKindName(EventKind::kCheckpointRestored)) {
    CheckpointRestored x;
    x.observed = observed;
    BULWARK_RETURN_IF_ERROR(Get(j, "step", &x.step));
    BULWARK_RETURN_IF_ERROR(Get(j, "source", &x.source));
    BULWARK_RETURN_IF_ERROR(Get(j, "newest_step", &x.newest_step));
    BULWARK_RETURN_IF_ERROR(Get(j, "restore_ms", &x.restore_ms));
    return Event(x);
  }
  if (kind == EventKindName(EventKind::kHangSuspected)) {
    HangSuspected x;
    x.observed = observed;
    int64_t since = 0, allowance = 0;
    BULWARK_RETURN_IF_ERROR(Get(j, "last_step", &x.last_step));
    BULWARK_RETURN_IF_ERROR(Get(j, "since", &since));
    BULWARK_RETURN_IF_ERROR(Get(j, "allowance_ms", &allowance));
    BULWARK_RETURN_IF_ERROR(Get(j, "first_step", &x.first_step));
    x.since = TimeFromMs(since);
    x.allowance = Duration(allowance);
    return Event(x);
  }
  if (kind == EventKindName(EventKind::kFailSlowSuspected)) {
    FailSlowSuspected x{machine, 0, 0, "", observed};
    BULWARK_RETURN_IF_ERROR(Get(j, "rounds", &x.rounds));
    BULWARK_RETURN_IF_ERROR(Get(j, "ratio", &x.ratio));
    BULWARK_RETURN_IF_ERROR(Get(j, "detail", &x.detail));
    return Event(x);
  }
  if (kind == EventKindName(EventKind::kTrainingAnomaly)) {
    TrainingAnomaly x;
    x.observed = observed;
    BULWARK_RETURN_IF_ERROR(Get(j, "step", &x.step));
    BULWARK_RETURN_IF_ERROR(Get(j, "anomaly", &x.kind));
    BULWARK_RETURN_IF_ERROR(Get(j, "culprits", &x.culprits));
    BULWARK_RETURN_IF_ERROR(Get(j, "culprit_ranks", &x.culprit_ranks));
    BULWARK_RETURN_IF_ERROR(Get(j, "reports", &x.reports));
    BULWARK_RETURN_IF_ERROR(Get(j, "halted", &x.halted));
    BULWARK_RETURN_IF_ERROR(Get(j, "detail", &x.detail));
    int64_t at = 0;
    BULWARK_RETURN_IF_ERROR(Get(j, "at", &at));
    x.at = TimeFromMs(at);
    return Event(x);
  }
  if (kind == EventKindName(EventKind::kStacksAnalyzed)) {
    StacksAnalyzed x;
    x.observed = observed;
    json groups;
    BULWARK_RETURN_IF_ERROR(Get(j, "incident", &x.incident));
    // Journals written before the field existed: 0 is "unknown", never stale.
    if (j.contains("generation")) BULWARK_RETURN_IF_ERROR(Get(j, "generation", &x.generation));
    BULWARK_RETURN_IF_ERROR(Get(j, "groups", &groups));
    BULWARK_RETURN_IF_ERROR(Get(j, "missing", &x.missing));
    BULWARK_RETURN_IF_ERROR(Get(j, "group", &x.group));
    BULWARK_RETURN_IF_ERROR(Get(j, "suspects", &x.suspects));
    BULWARK_RETURN_IF_ERROR(Get(j, "why", &x.why));
    for (const json& g : groups) {
      StackGroupSummary s;
      BULWARK_RETURN_IF_ERROR(Get(g, "count", &s.count));
      BULWARK_RETURN_IF_ERROR(Get(g, "stack", &s.stack));
      BULWARK_RETURN_IF_ERROR(Get(g, "ranks", &s.ranks));
      x.groups.push_back(std::move(s));
    }
    return Event(x);
  }
  if (kind == EventKindName(EventKind::kDiagnosticsReported)) {
    DiagnosticsReported x;
    x.observed = observed;
    x.machine = machine;
    json results;
    BULWARK_RETURN_IF_ERROR(Get(j, "incident", &x.incident));
    BULWARK_RETURN_IF_ERROR(Get(j, "alignment_hash", &x.alignment_hash));
    BULWARK_RETURN_IF_ERROR(Get(j, "results", &results));
    if (!results.is_array()) return Status::InvalidArgument("journal record field 'results': not an array");
    for (const json& r : results) {
      DiagnosticResult d;
      BULWARK_RETURN_IF_ERROR(Get(r, "test", &d.test));
      BULWARK_RETURN_IF_ERROR(Get(r, "passed", &d.passed));
      BULWARK_RETURN_IF_ERROR(Get(r, "detail", &d.detail));
      BULWARK_RETURN_IF_ERROR(Get(r, "ms", &d.ms));
      x.results.push_back(std::move(d));
    }
    return Event(x);
  }
  if (kind == EventKindName(EventKind::kLadderDeadline)) {
    LadderDeadline x;
    x.observed = observed;
    BULWARK_RETURN_IF_ERROR(Get(j, "incident", &x.incident));
    return Event(x);
  }
  if (kind == EventKindName(EventKind::kReleaseCreated)) {
    ReleaseCreated x;
    x.observed = observed;
    BULWARK_RETURN_IF_ERROR(Get(j, "release", &x.release));
    BULWARK_RETURN_IF_ERROR(Get(j, "now", &x.now));
    BULWARK_RETURN_IF_ERROR(Get(j, "why", &x.why));
    return Event(x);
  }
  if (kind == EventKindName(EventKind::kRollbackRequested)) {
    RollbackRequested x;
    x.observed = observed;
    BULWARK_RETURN_IF_ERROR(Get(j, "to", &x.to));
    BULWARK_RETURN_IF_ERROR(Get(j, "why", &x.why));
    return Event(x);
  }
  if (kind == EventKindName(EventKind::kReleaseDue)) {
    ReleaseDue x;
    x.observed = observed;
    BULWARK_RETURN_IF_ERROR(Get(j, "release", &x.release));
    return Event(x);
  }
  if (kind == EventKindName(EventKind::kReleaseStaged)) {
    ReleaseStaged x;
    x.observed = observed;
    BULWARK_RETURN_IF_ERROR(Get(j, "machine", &x.machine));
    BULWARK_RETURN_IF_ERROR(Get(j, "release", &x.release));
    BULWARK_RETURN_IF_ERROR(Get(j, "ready", &x.ready));
    BULWARK_RETURN_IF_ERROR(Get(j, "detail", &x.detail));
    return Event(x);
  }
  if (kind == EventKindName(EventKind::kStageDue)) {
    StageDue x;
    x.observed = observed;
    BULWARK_RETURN_IF_ERROR(Get(j, "release", &x.release));
    return Event(x);
  }
  if (kind == EventKindName(EventKind::kRequeueDue)) return Event(RequeueDue{observed});
  if (kind == EventKindName(EventKind::kAlignmentCheckDue)) return Event(AlignmentCheckDue{observed});
  return Status::InvalidArgument("journal record field 'kind': unknown event kind '" + kind + "'");
}

namespace {

// The origin fields of `j`; absent ones keep their zero values, as rows
// journaled before a field existed did.
Result<JournalOrigin> DecodeOrigin(const json& j) {
  if (!j.is_object()) return Status::InvalidArgument("journal record field 'origin': not an object");
  JournalOrigin o;
  if (j.contains("machine")) BULWARK_RETURN_IF_ERROR(Get(j, "machine", &o.machine));
  if (j.contains("incarnation")) BULWARK_RETURN_IF_ERROR(Get(j, "incarnation", &o.incarnation));
  if (j.contains("seq")) BULWARK_RETURN_IF_ERROR(Get(j, "seq", &o.seq));
  return o;
}

Status DecodeJournalFields(const json& r, JournalRow& row) {
  if (!r.is_object()) return Status::InvalidArgument("journal record is not a JSON object");
  if (r.contains("type")) BULWARK_RETURN_IF_ERROR(Get(r, "type", &row.type));
  if (row.type == "create") {
    BULWARK_RETURN_IF_ERROR(Get(r, "standbys", &row.standbys));
  } else if (row.type == "event") {
    json e;
    BULWARK_RETURN_IF_ERROR(Get(r, "event", &e));
    Result<Event> ev = DecodeEvent(e);
    if (!ev.ok()) return ev.status();
    row.event = std::move(*ev);
    if (r.contains("origin")) {
      Result<JournalOrigin> o = DecodeOrigin(r["origin"]);
      if (!o.ok()) return o.status();
      row.origin = *o;
    }
  } else if (row.type == "release") {
    json x;
    BULWARK_RETURN_IF_ERROR(Get(r, "release", &x));
    Result<Release> rel = DecodeRelease(x);
    if (!rel.ok()) return rel.status();
    row.release = std::move(*rel);
  } else if (row.type == "done") {
    if (r.contains("step")) BULWARK_RETURN_IF_ERROR(Get(r, "step", &row.step));
  } else if (row.type == "origin") {
    Result<JournalOrigin> o = DecodeOrigin(r);
    if (!o.ok()) return o.status();
    row.origin = *o;
  }
  return Status::OK();
}

}  // namespace

Result<JournalRow> DecodeJournalRow(const std::string& text) {
  const json r = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (r.is_discarded()) return Status::Corrupt("journal record is not valid JSON");
  JournalRow row;
  Status st = DecodeJournalFields(r, row);
  if (!st.ok()) return Status::Corrupt(st.message());
  return row;
}

json EncodeRelease(const Release& r) {
  return json{{"number", r.number}, {"argv", r.argv}, {"env", r.env},   {"binary_hash", r.binary_hash},
              {"who", r.who},       {"why", r.why},   {"created_ms", r.created_ms}, {"now", r.now}};
}

Result<Release> DecodeRelease(const json& j) {
  if (!j.is_object()) return Status::InvalidArgument("journal record field 'release': not an object");
  Release r;
  BULWARK_RETURN_IF_ERROR(Get(j, "number", &r.number));
  BULWARK_RETURN_IF_ERROR(Get(j, "argv", &r.argv));
  BULWARK_RETURN_IF_ERROR(Get(j, "env", &r.env));
  BULWARK_RETURN_IF_ERROR(Get(j, "binary_hash", &r.binary_hash));
  BULWARK_RETURN_IF_ERROR(Get(j, "who", &r.who));
  BULWARK_RETURN_IF_ERROR(Get(j, "why", &r.why));
  BULWARK_RETURN_IF_ERROR(Get(j, "created_ms", &r.created_ms));
  BULWARK_RETURN_IF_ERROR(Get(j, "now", &r.now));
  return r;
}

json EncodeLaunch(const JobLaunch& l) {
  return json{{"id", l.spec.id},
              {"world_size", l.spec.world_size},
              {"ranks_per_machine", l.spec.ranks_per_machine},
              {"argv", l.argv},
              {"env", l.env},
              {"master_addr", l.master_addr},
              {"master_port_base", l.master_port_base},
              {"persist_every", l.persist_every},
              {"durable_dir", l.durable_dir},
              {"tp", l.spec.tp},
              {"pp", l.spec.pp},
              {"recovery", l.spec.recovery == JobSpec::Recovery::kRequeue ? "requeue" : "standby"},
              {"provisioning_delay_ms", ToMs(l.spec.provisioning_delay)}};
}

Result<JobLaunch> DecodeLaunch(const json& j) {
  JobLaunch l;
  BULWARK_RETURN_IF_ERROR(Get(j, "id", &l.spec.id));
  BULWARK_RETURN_IF_ERROR(Get(j, "world_size", &l.spec.world_size));
  BULWARK_RETURN_IF_ERROR(Get(j, "ranks_per_machine", &l.spec.ranks_per_machine));
  BULWARK_RETURN_IF_ERROR(Get(j, "argv", &l.argv));
  BULWARK_RETURN_IF_ERROR(Get(j, "env", &l.env));
  BULWARK_RETURN_IF_ERROR(Get(j, "master_addr", &l.master_addr));
  BULWARK_RETURN_IF_ERROR(Get(j, "master_port_base", &l.master_port_base));
  // Jobs submitted before in-memory checkpoints lack these: they keep the
  // defaults rather than fail to replay.
  if (j.contains("persist_every")) BULWARK_RETURN_IF_ERROR(Get(j, "persist_every", &l.persist_every));
  if (j.contains("durable_dir")) BULWARK_RETURN_IF_ERROR(Get(j, "durable_dir", &l.durable_dir));
  if (j.contains("tp")) BULWARK_RETURN_IF_ERROR(Get(j, "tp", &l.spec.tp));
  if (j.contains("pp")) BULWARK_RETURN_IF_ERROR(Get(j, "pp", &l.spec.pp));
  if (j.contains("recovery")) {
    std::string mode;
    BULWARK_RETURN_IF_ERROR(Get(j, "recovery", &mode));
    if (mode != "standby" && mode != "requeue") {
      return Status::InvalidArgument("job record field 'recovery': '" + mode + "' is neither standby nor requeue");
    }
    l.spec.recovery = mode == "requeue" ? JobSpec::Recovery::kRequeue : JobSpec::Recovery::kStandby;
  }
  if (j.contains("provisioning_delay_ms")) {
    int64_t ms = 0;
    BULWARK_RETURN_IF_ERROR(Get(j, "provisioning_delay_ms", &ms));
    l.spec.provisioning_delay = Duration(ms);
  }
  for (const std::string& a : l.argv) l.spec.command += (l.spec.command.empty() ? "" : " ") + a;
  return l;
}

json IncidentJson(const Incident& i) {
  json j{{"id", i.id},
         {"class", IncidentClassName(i.cls)},
         {"cause", i.cause},
         {"evicted", i.evicted},
         {"resolution", ResolutionName(i.resolution)},
         {"why", i.why},
         {"detected_ms", Ms(i.detected)},
         {"detect_s", Seconds(i.DetectDuration())},
         {"step_at_fault", i.step_at_fault},
         {"closed", i.closed},
         {"summary", i.Summary()}};
  if (i.fault) j["fault_ms"] = Ms(*i.fault);
  if (auto d = i.LocalizeDuration()) j["localize_s"] = Seconds(*d);
  if (auto d = i.RecoverDuration()) j["recover_s"] = Seconds(*d);
  if (i.restored_step) j["restored_step"] = *i.restored_step;
  if (!i.restore_source.empty()) j["restore_source"] = i.restore_source;
  if (i.restore_ms) j["restore_ms"] = *i.restore_ms;
  if (i.decision) j["decision_ms"] = Ms(*i.decision);
  if (i.recovered) j["recovered_ms"] = Ms(*i.recovered);
  if (auto l = i.LostSteps()) j["lost_steps"] = *l;
  if (!i.stacks.groups.empty() || !i.stacks.why.empty()) {
    j["stacks"] = {{"groups", StackGroupsJson(i.stacks.groups)}, {"missing", i.stacks.missing},
                   {"group", i.stacks.group}, {"suspects", i.stacks.suspects}, {"why", i.stacks.why}};
  }
  if (!i.notes.empty()) j["notes"] = i.notes;
  if (!i.rungs.empty()) {
    json rungs = json::array();
    for (const RungRecord& r : i.rungs) {
      json x{{"rung", r.rung}, {"started_ms", Ms(r.started)}, {"outcome", r.outcome}};
      if (r.ended) x["seconds"] = Seconds(*r.ended - r.started);
      rungs.push_back(std::move(x));
    }
    j["ladder"] = std::move(rungs);
  }
  return j;
}

json BreakdownJson(const TimeBreakdown& b) {
  json by;
  for (int c = 0; c < kNumTimeCategories; ++c) {
    by[TimeCategoryName(static_cast<TimeCategory>(c))] = Seconds(b.by_category[c]);
  }
  return json{{"wall_s", Seconds(b.wall)}, {"ettr", b.ettr()}, {"seconds", by}};
}

}  // namespace bulwark::plane
