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

// --- events: one field list each (controller/event.h), walked both ways ---

// A field's JSON: times and durations as milliseconds, an inspection by
// name, nested records as objects, the rest as nlohmann writes them.
json FieldJson(Time t) { return Ms(t); }
json FieldJson(Duration d) { return ToMs(d); }
json FieldJson(InspectionKind k) { return InspectionKindName(k); }
json FieldJson(const std::vector<StackGroupSummary>& groups) { return StackGroupsJson(groups); }
json FieldJson(const std::vector<DiagnosticResult>& results) {
  json a = json::array();
  for (const DiagnosticResult& r : results) {
    a.push_back({{"test", r.test}, {"passed", r.passed}, {"detail", r.detail}, {"ms", r.ms}});
  }
  return a;
}
template <typename T>
json FieldJson(const T& x) {
  return x;
}

// The inverse of FieldJson, or InvalidArgument naming the field.
template <typename T>
Status FieldFrom(const json& j, const char* name, T* out) {
  return Get(j, name, out);
}
Status FieldFrom(const json& j, const char* name, Time* out) {
  int64_t ms = 0;
  BULWARK_RETURN_IF_ERROR(Get(j, name, &ms));
  *out = TimeFromMs(ms);
  return Status::OK();
}
Status FieldFrom(const json& j, const char* name, Duration* out) {
  int64_t ms = 0;
  BULWARK_RETURN_IF_ERROR(Get(j, name, &ms));
  *out = Duration(ms);
  return Status::OK();
}
Status FieldFrom(const json& j, const char* name, InspectionKind* out) {
  std::string s;
  BULWARK_RETURN_IF_ERROR(Get(j, name, &s));
  bool ok = false;
  *out = InspectionFromName(s, &ok);
  if (!ok) return Status::InvalidArgument(std::string("journal record field '") + name + "': unknown kind '" + s + "'");
  return Status::OK();
}
Status FieldFrom(const json& j, const char* name, std::vector<StackGroupSummary>* out) {
  json groups;
  BULWARK_RETURN_IF_ERROR(Get(j, name, &groups));
  for (const json& g : groups) {
    StackGroupSummary s;
    BULWARK_RETURN_IF_ERROR(Get(g, "count", &s.count));
    BULWARK_RETURN_IF_ERROR(Get(g, "stack", &s.stack));
    BULWARK_RETURN_IF_ERROR(Get(g, "ranks", &s.ranks));
    out->push_back(std::move(s));
  }
  return Status::OK();
}
Status FieldFrom(const json& j, const char* name, std::vector<DiagnosticResult>* out) {
  json results;
  BULWARK_RETURN_IF_ERROR(Get(j, name, &results));
  if (!results.is_array()) return Status::InvalidArgument(std::string("journal record field '") + name + "': not an array");
  for (const json& r : results) {
    DiagnosticResult d;
    BULWARK_RETURN_IF_ERROR(Get(r, "test", &d.test));
    BULWARK_RETURN_IF_ERROR(Get(r, "passed", &d.passed));
    BULWARK_RETURN_IF_ERROR(Get(r, "detail", &d.detail));
    BULWARK_RETURN_IF_ERROR(Get(r, "ms", &d.ms));
    out->push_back(std::move(d));
  }
  return Status::OK();
}

// Visitors of an event's field list (event.h): one writes each field into
// `j`, the other reads each back, keeping the first error.
struct FieldWriter {
  json& j;
  template <typename T>
  void operator()(const char* name, const T& x) {
    j[name] = FieldJson(x);
  }
  template <typename T>
  void Optional(const char* name, const T& x) {
    (*this)(name, x);
  }
};
struct FieldReader {
  const json& j;
  Status status;
  template <typename T>
  void operator()(const char* name, T& x) {
    if (status.ok()) status = FieldFrom(j, name, &x);
  }
  // Rows journaled before the field existed lack it: it keeps its default.
  template <typename T>
  void Optional(const char* name, T& x) {
    if (j.contains(name)) (*this)(name, x);
  }
};

// The alternative of Event whose kind name is `kind`, read from `j`.
template <size_t I = 0>
Result<Event> DecodeKind(const std::string& kind, const json& j) {
  if constexpr (I == std::variant_size_v<Event>) {
    return Status::InvalidArgument("journal record field 'kind': unknown event kind '" + kind + "'");
  } else {
    if (kind != EventKindName(static_cast<EventKind>(I))) return DecodeKind<I + 1>(kind, j);
    using T = std::variant_alternative_t<I, Event>;
    T x;
    FieldReader r{j, Status::OK()};
    T::Fields(x, r);
    if (!r.status.ok()) return r.status;
    return Event(std::in_place_index<I>, std::move(x));
  }
}

}  // namespace

json EncodeEvent(const Event& e) {
  json j;
  j["kind"] = EventKindName(KindOf(e));
  std::visit(
      [&](const auto& x) {
        FieldWriter w{j};
        std::decay_t<decltype(x)>::Fields(x, w);
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
  BULWARK_RETURN_IF_ERROR(Get(j, "kind", &kind));
  return DecodeKind(kind, j);
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
    if (r.contains("domains")) BULWARK_RETURN_IF_ERROR(Get(r, "domains", &row.domains));
  } else if (row.type == "events") {
    json list;
    BULWARK_RETURN_IF_ERROR(Get(r, "events", &list));
    if (!list.is_array()) return Status::InvalidArgument("journal record field 'events': not an array");
    for (const json& e : list) {
      Result<Event> ev = DecodeEvent(e);
      if (!ev.ok()) return ev.status();
      row.events.push_back(std::move(*ev));
    }
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
              {"recovery", RecoveryName(l.spec.recovery)},
              {"provisioning_delay_ms", ToMs(l.spec.provisioning_delay)},
              {"policy", l.policy}};
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
  if (j.contains("policy")) BULWARK_RETURN_IF_ERROR(Get(j, "policy", &l.policy));
  if (j.contains("pp")) BULWARK_RETURN_IF_ERROR(Get(j, "pp", &l.spec.pp));
  if (j.contains("recovery")) {
    std::string mode;
    BULWARK_RETURN_IF_ERROR(Get(j, "recovery", &mode));
    Result<JobSpec::Recovery> r = ParseRecovery(mode);
    if (!r.ok()) return Status::InvalidArgument("job record field 'recovery': " + r.status().message());
    l.spec.recovery = *r;
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
  if (auto d = i.StallDuration()) j["stall_s"] = Seconds(*d);
  if (i.trained_on) {
    j["trained_on"] = *i.trained_on;
    if (i.rejoined) {
      j["rejoined_ms"] = Ms(*i.rejoined);
      if (i.recovered) j["degraded_s"] = Seconds(*i.rejoined - *i.recovered);
    }
  }
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
