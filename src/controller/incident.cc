#include "controller/incident.h"

namespace bulwark::controller {

const char* IncidentClassName(IncidentClass c) {
  switch (c) {
    case IncidentClass::kExplicit: return "explicit";
    case IncidentClass::kImplicit: return "implicit";
    case IncidentClass::kManual: return "manual";
  }
  return "unknown";
}

const char* ResolutionName(Resolution r) {
  switch (r) {
    case Resolution::kOpen: return "open";
    case Resolution::kReattempt: return "reattempt";
    case Resolution::kEvictedAndReplaced: return "evicted_and_replaced";
    case Resolution::kWaiting: return "waiting";
    case Resolution::kStopped: return "stopped";
    case Resolution::kUpdated: return "updated";
    case Resolution::kRolledBack: return "rolled_back";
    case Resolution::kRequeued: return "requeued";
  }
  return "unknown";
}

Duration Incident::DetectDuration() const {
  if (!fault || *fault > detected) return Duration(0);
  return detected - *fault;
}

std::optional<Duration> Incident::LocalizeDuration() const {
  if (!localized) return std::nullopt;
  return *localized - detected;
}

std::optional<Duration> Incident::RecoverDuration() const {
  if (!recovered || !decision) return std::nullopt;
  return *recovered - *decision;
}

std::optional<Duration> Incident::StallDuration() const {
  if (!recovered) return std::nullopt;
  return *recovered - fault.value_or(detected);
}

void IncidentLog::Rejoined(Time t) {
  for (size_t k = rejoin_from_; k < incidents_.size(); ++k) {
    Incident& i = incidents_[k];
    if (i.trained_on && !i.rejoined) i.rejoined = t;
  }
  // The newest may still be open, and narrow the job later.
  if (!incidents_.empty()) rejoin_from_ = incidents_.size() - 1;
}

std::optional<int64_t> Incident::LostSteps() const {
  if (!restored_step) return std::nullopt;
  // A restore from a checkpoint newer than the fault step (a checkpoint that
  // raced the fault report) loses nothing rather than a negative amount.
  return step_at_fault > *restored_step ? step_at_fault - *restored_step : 0;
}

std::string Incident::Summary() const {
  std::string s = "incident " + std::to_string(id) + " (" + IncidentClassName(cls) + ", " +
                  ResolutionName(resolution) + "): " + cause;
  if (!evicted.empty()) {
    s += "; evicted";
    for (const MachineId& m : evicted) s += " " + m;
  }
  if (!why.empty()) s += "; " + why;
  return s;
}

Incident* IncidentLog::Current() {
  if (incidents_.empty() || incidents_.back().closed) return nullptr;
  return &incidents_.back();
}

const Incident* IncidentLog::Current() const {
  if (incidents_.empty() || incidents_.back().closed) return nullptr;
  return &incidents_.back();
}

Incident& IncidentLog::OpenOrJoin(IncidentClass cls, const std::string& cause,
                                  std::optional<Time> fault, Time detected,
                                  int64_t step_at_fault) {
  if (Incident* open = Current()) {
    open->cause += "; then " + cause;
    return *open;
  }
  Incident inc;
  inc.id = static_cast<int64_t>(incidents_.size()) + 1;
  inc.cls = cls;
  inc.cause = cause;
  inc.fault = fault;
  inc.detected = detected;
  inc.step_at_fault = step_at_fault;
  incidents_.push_back(std::move(inc));
  return incidents_.back();
}

const Incident* IncidentLog::Find(int64_t id) const {
  if (id < 1 || id > static_cast<int64_t>(incidents_.size())) return nullptr;
  return &incidents_[id - 1];
}

}  // namespace bulwark::controller
