// JSON forms of the controller's values, for the journal (which must decode
// exactly what it encoded: replay depends on it) and for reports to the CLI.
#pragma once

#include <nlohmann/json.hpp>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "controller/event.h"
#include "controller/incident.h"
#include "controller/launch.h"
#include "controller/ledger.h"
#include "plane/core.h"

namespace bulwark::plane {

nlohmann::json EncodeEvent(const Event& e);
// InvalidArgument naming the field for a record this version cannot read.
Result<Event> DecodeEvent(const nlohmann::json& j);

// One journal row as Plane::Rebuild replays it. Rows are JSON objects with
// a "type": create (with "standbys"), reconcile, event (with "event" and
// optionally the agent "origin" it came from), done (with "step"), origin
// (the origin fields at top level), release (with "release"). Types this version does not know are
// kept with nothing else decoded, and replay skips them.
struct JournalOrigin {
  std::string machine;
  int64_t incarnation = 0;
  int64_t seq = 0;
};
struct JournalRow {
  std::string type;
  std::vector<MachineId> standbys;    // create
  std::map<MachineId, std::string> domains;  // create: failure domains (absent in older journals)
  std::optional<Event> event;         // event
  std::vector<Event> events;          // events: decided together (Controller::HandleAll)
  std::optional<JournalOrigin> origin;  // event (when an agent sent it), origin
  int64_t step = 0;                   // done
  std::optional<Release> release;     // release: what the release runs
};
// Corrupt naming the field for a row that is not JSON or lacks what its type
// needs: a damaged journal is reported, never replayed in part or thrown.
Result<JournalRow> DecodeJournalRow(const std::string& text);

nlohmann::json EncodeRelease(const Release& r);
Result<Release> DecodeRelease(const nlohmann::json& j);

nlohmann::json EncodeLaunch(const JobLaunch& l);
Result<JobLaunch> DecodeLaunch(const nlohmann::json& j);

// Report forms: times as milliseconds, durations as seconds.
nlohmann::json IncidentJson(const Incident& i);
nlohmann::json StackGroupsJson(const std::vector<StackGroupSummary>& groups);
nlohmann::json BreakdownJson(const TimeBreakdown& b);

}  // namespace bulwark::plane
