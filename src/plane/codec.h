// JSON forms of the controller's values, for the journal (which must decode
// exactly what it encoded: replay depends on it) and for reports to the CLI.
#pragma once

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "controller/event.h"
#include "controller/incident.h"
#include "controller/launch.h"
#include "controller/ledger.h"

namespace bulwark::controller {

nlohmann::json EncodeEvent(const Event& e);
// InvalidArgument naming the field for a record this version cannot read.
Result<Event> DecodeEvent(const nlohmann::json& j);

nlohmann::json EncodeLaunch(const JobLaunch& l);
Result<JobLaunch> DecodeLaunch(const nlohmann::json& j);

// Report forms: times as milliseconds, durations as seconds.
nlohmann::json IncidentJson(const Incident& i);
nlohmann::json StackGroupsJson(const std::vector<StackGroupSummary>& groups);
nlohmann::json BreakdownJson(const TimeBreakdown& b);

}  // namespace bulwark::controller
