#include "controller/policy_fields.h"

#include <cmath>
#include <cstdio>
#include <type_traits>
#include <variant>

#include "common/suggest.h"

namespace bulwark::controller {
namespace {

// A scalar of PolicyConfig itself, or of its ladder (PolicyConfig::ladder).
template <class T>
struct In {
  T PolicyConfig::*top = nullptr;
  T LadderConfig::*ladder = nullptr;
  T& of(PolicyConfig& p) const { return top ? p.*top : p.ladder.*ladder; }
  const T& of(const PolicyConfig& p) const { return top ? p.*top : p.ladder.*ladder; }
};
using Member = std::variant<In<double>, In<int>, In<Duration>, In<bool>>;
template <class T>
Member Top(T PolicyConfig::*m) {
  return In<T>{m, nullptr};
}
template <class T>
Member Ladder(T LadderConfig::*m) {
  return In<T>{nullptr, m};
}

struct Field {
  const char* name;
  Member member;
};

// The scalar fields of PolicyConfig (policy_config.h says what each does).
// Sets and lists (signatures, the ladder's rungs and tests) have flags of
// their own.
const std::vector<Field>& Fields() {
  using P = PolicyConfig;
  using L = LadderConfig;
  static const std::vector<Field> fields = {
      {"network_alerts_to_evict", Top(&P::network_alerts_to_evict)},
      {"network_alert_window", Top(&P::network_alert_window)},
      {"crash_window", Top(&P::crash_window)},
      {"max_crashes_without_progress", Top(&P::max_crashes_without_progress)},
      {"crash_loop_quantile", Top(&P::crash_loop_quantile)},
      {"daily_failure_rate", Top(&P::daily_failure_rate)},
      {"standby_quantile", Top(&P::standby_quantile)},
      {"standby_ready_wait", Top(&P::standby_ready_wait)},
      {"update_force_after", Top(&P::update_force_after)},
      {"release_stage_timeout", Top(&P::release_stage_timeout)},
      {"rollback_window", Top(&P::rollback_window)},
      {"domain_burst_machines", Top(&P::domain_burst_machines)},
      {"domain_burst_window", Top(&P::domain_burst_window)},
      {"domain_probation", Top(&P::domain_probation)},
      {"domain_aware_placement", Top(&P::domain_aware_placement)},
      {"ledger_window", Top(&P::ledger_window)},
      {"narrow_to_pool", Top(&P::narrow_to_pool)},
      {"checkup_evicted", Top(&P::checkup_evicted)},
      {"checkup_domain_return", Top(&P::checkup_domain_return)},
      {"hang_factor", Top(&P::hang_factor)},
      {"hang_floor", Top(&P::hang_floor)},
      {"hang_first_step", Top(&P::hang_first_step)},
      {"hang_warmup_steps", Top(&P::hang_warmup_steps)},
      {"hang_window", Top(&P::hang_window)},
      {"trace_deadline", Top(&P::trace_deadline)},
      {"process_stuck", Top(&P::process_stuck)},
      {"slow_round", Top(&P::slow_round)},
      {"slow_rounds", Top(&P::slow_rounds)},
      {"slow_ratio", Top(&P::slow_ratio)},
      {"slow_long_rounds", Top(&P::slow_long_rounds)},
      {"slow_long_ratio", Top(&P::slow_long_ratio)},
      {"slow_min_steps", Top(&P::slow_min_steps)},
      {"slow_jobwide_ratio", Top(&P::slow_jobwide_ratio)},
      {"slow_link_ratio", Top(&P::slow_link_ratio)},
      {"spike_factor", Top(&P::spike_factor)},
      {"spike_window", Top(&P::spike_window)},
      {"spike_min_history", Top(&P::spike_min_history)},
      {"anomaly_wait", Top(&P::anomaly_wait)},
      // The stop-time ladder's scalars (ladder.h); its rungs and tests are lists, with flags of their own.
      {"ladder_diagnose_budget", Ladder(&L::diagnose_budget)},
      {"ladder_replay_budget", Ladder(&L::replay_budget)},
      {"ladder_compute_slow_ratio", Ladder(&L::compute_slow_ratio)},
      {"ladder_net_slow_ratio", Ladder(&L::net_slow_ratio)},
      {"ladder_settle_steps", Ladder(&L::settle_steps)},
      {"ladder_replay_k", Ladder(&L::replay_k)},
      {"ladder_align_every", Ladder(&L::align_every)},
  };
  return fields;
}

Status Bad(const std::string& name, const std::string& what) {
  return Status::InvalidArgument("policy: " + name + " " + what);
}

// The value a field holds, as the file writes it.
double Get(const PolicyConfig& p, const Member& m) {
  return std::visit(
      [&](const auto& member) -> double {
        const auto& v = member.of(p);
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
  if (auto* m = std::get_if<In<double>>(&field->member)) {
    m->of(*p) = value;
  } else if (auto* m = std::get_if<In<int>>(&field->member)) {
    if (value != std::floor(value) || std::fabs(value) > 1e9) return Bad(name, "is a count: give a whole number");
    m->of(*p) = static_cast<int>(value);
  } else if (auto* m = std::get_if<In<Duration>>(&field->member)) {
    if (std::fabs(value) > 1e9) return Bad(name, "is a time in seconds: " + Number(value) + " is too large");
    m->of(*p) = Duration(static_cast<int64_t>(std::llround(value * 1000.0)));
  } else if (auto* m = std::get_if<In<bool>>(&field->member)) {
    if (value != 0 && value != 1) return Bad(name, "is on or off: give true or false (1 or 0)");
    m->of(*p) = value != 0;
  }
  return Status::OK();
}

std::vector<PolicyValue> PolicyValues(const PolicyConfig& p) {
  std::vector<PolicyValue> out;
  for (const Field& f : Fields()) {
    const bool seconds = std::holds_alternative<In<Duration>>(f.member);
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
