#include "controller/policy_fields.h"

#include <cmath>
#include <cstdio>
#include <type_traits>
#include <variant>

#include "common/suggest.h"

namespace bulwark::controller {
namespace {

using Member = std::variant<double PolicyConfig::*, int PolicyConfig::*, Duration PolicyConfig::*, bool PolicyConfig::*>;

struct Field {
  const char* name;
  Member member;
};

// The scalar fields of PolicyConfig (policy_config.h says what each does).
// Sets and lists (signatures, tests) and the ladder have flags of their own.
const std::vector<Field>& Fields() {
  using P = PolicyConfig;
  static const std::vector<Field> fields = {
      {"network_alerts_to_evict", &P::network_alerts_to_evict},
      {"network_alert_window", &P::network_alert_window},
      {"crash_window", &P::crash_window},
      {"max_crashes_without_progress", &P::max_crashes_without_progress},
      {"crash_loop_quantile", &P::crash_loop_quantile},
      {"daily_failure_rate", &P::daily_failure_rate},
      {"standby_quantile", &P::standby_quantile},
      {"standby_ready_wait", &P::standby_ready_wait},
      {"update_force_after", &P::update_force_after},
      {"release_stage_timeout", &P::release_stage_timeout},
      {"rollback_window", &P::rollback_window},
      {"domain_burst_machines", &P::domain_burst_machines},
      {"domain_burst_window", &P::domain_burst_window},
      {"domain_probation", &P::domain_probation},
      {"domain_aware_placement", &P::domain_aware_placement},
      {"ledger_window", &P::ledger_window},
      {"narrow_to_pool", &P::narrow_to_pool},
      {"checkup_evicted", &P::checkup_evicted},
      {"checkup_domain_return", &P::checkup_domain_return},
      {"hang_factor", &P::hang_factor},
      {"hang_floor", &P::hang_floor},
      {"hang_first_step", &P::hang_first_step},
      {"hang_warmup_steps", &P::hang_warmup_steps},
      {"hang_window", &P::hang_window},
      {"trace_deadline", &P::trace_deadline},
      {"process_stuck", &P::process_stuck},
      {"slow_round", &P::slow_round},
      {"slow_rounds", &P::slow_rounds},
      {"slow_ratio", &P::slow_ratio},
      {"slow_long_rounds", &P::slow_long_rounds},
      {"slow_long_ratio", &P::slow_long_ratio},
      {"slow_min_steps", &P::slow_min_steps},
      {"slow_jobwide_ratio", &P::slow_jobwide_ratio},
      {"slow_link_ratio", &P::slow_link_ratio},
      {"spike_factor", &P::spike_factor},
      {"spike_window", &P::spike_window},
      {"spike_min_history", &P::spike_min_history},
      {"anomaly_wait", &P::anomaly_wait},
  };
  return fields;
}

Status Bad(const std::string& name, const std::string& what) {
  return Status::InvalidArgument("policy: " + name + " " + what);
}

// The value a field holds, as the file writes it.
double Get(const PolicyConfig& p, const Member& m) {
  return std::visit(
      [&](auto member) -> double {
        const auto& v = p.*member;
        if constexpr (std::is_same_v<std::decay_t<decltype(v)>, Duration>) return v.count() / 1000.0;
        else return static_cast<double>(v);
      },
      m);
}

std::string Number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

Status ApplyPolicyValues(const std::map<std::string, double>& values, PolicyConfig* p) {
  for (const auto& [name, value] : values) BULWARK_RETURN_IF_ERROR(SetPolicyField(name, value, p));
  return p->Validate();
}

Status SetPolicyField(const std::string& name, double value, PolicyConfig* p) {
  const Field* field = nullptr;
  for (const Field& f : Fields()) {
    if (name == f.name) field = &f;
  }
  if (field == nullptr) {
    std::vector<std::string> names;
    for (const Field& f : Fields()) names.push_back(f.name);
    const std::string near = Nearest(name, names);
    return Status::InvalidArgument("policy: unknown field '" + name + "'" +
                                   (near.empty() ? "" : "; did you mean '" + near + "'?") +
                                   " (the fields: docs/control-plane.md, \"The policy a cluster runs with\")");
  }
  if (!std::isfinite(value)) return Bad(name, "must be a finite number");
  if (auto* m = std::get_if<double PolicyConfig::*>(&field->member)) {
    p->**m = value;
  } else if (auto* m = std::get_if<int PolicyConfig::*>(&field->member)) {
    if (value != std::floor(value) || std::fabs(value) > 1e9) return Bad(name, "is a count: give a whole number");
    p->**m = static_cast<int>(value);
  } else if (auto* m = std::get_if<Duration PolicyConfig::*>(&field->member)) {
    if (std::fabs(value) > 1e9) return Bad(name, "is a time in seconds: " + Number(value) + " is too large");
    p->**m = Duration(static_cast<int64_t>(std::llround(value * 1000.0)));
  } else if (auto* m = std::get_if<bool PolicyConfig::*>(&field->member)) {
    if (value != 0 && value != 1) return Bad(name, "is on or off: give true or false (1 or 0)");
    p->**m = value != 0;
  }
  return Status::OK();
}

std::vector<PolicyValue> PolicyValues(const PolicyConfig& p) {
  std::vector<PolicyValue> out;
  for (const Field& f : Fields()) {
    const bool seconds = std::holds_alternative<Duration PolicyConfig::*>(f.member);
    out.push_back({f.name, Get(p, f.member), seconds ? "s" : ""});
  }
  return out;
}

std::vector<PolicyValue> ChangedPolicy(const PolicyConfig& p) {
  const std::vector<PolicyValue> now = PolicyValues(p), shipped = PolicyValues(PolicyConfig{});
  std::vector<PolicyValue> out;
  for (size_t i = 0; i < now.size(); ++i) {
    if (now[i].value != shipped[i].value) out.push_back(now[i]);
  }
  return out;
}

std::string DescribePolicy(const std::vector<PolicyValue>& changed) {
  if (changed.empty()) return "defaults";
  std::string out;
  for (const PolicyValue& v : changed) {
    out += (out.empty() ? "" : ", ") + v.name + " " + Number(v.value) + (*v.unit ? std::string(" ") + v.unit : "");
  }
  return out;
}

}  // namespace bulwark::controller
