// The demo's report: a pure function from what the run recorded (the
// controller's incidents and ledger, the injection schedule, the outcome)
// to a self-contained HTML page with an inline SVG timeline, a Markdown
// summary and the plain-text tables the CLI prints. No I/O, no clock.
//
// The run record (what `bulwark demo` writes as report.json):
//   {"title": str, "started_ms": int, "ended_ms": int,
//    "setup": {"machines": int, "standby": int, "config": str, "steps": int, ...},
//    "schedule": [{"at_ms": int, "fault": str, "machine": str, "incident": int|null}],
//    "incidents": [controller incident JSON, as `bulwark incidents --json`],
//    "ledger": controller ledger JSON with "timeline" (`bulwark ledger --json`),
//    "outcome": {"completed": bool, "step": int, "loss": num|null, "message": str}}
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace bulwark::demo {

struct Report {
  std::string html;      // one file, no external resources
  std::string svg;       // the timeline alone (also inlined in html)
  std::string markdown;  // headline, ledger, incidents, schedule
};

// InvalidArgument naming the missing field when `run` lacks one.
Result<Report> RenderReport(const nlohmann::json& run);

// Terminal tables, as the demo prints them at the end.
std::string IncidentTable(const nlohmann::json& incidents, const nlohmann::json& schedule);
std::string LedgerTable(const nlohmann::json& ledger);

// ETTR over the trailing `window_s` seconds at each of `points` evenly spaced
// instants across the timeline: [[t_s since start, ettr], ...].
nlohmann::json SlidingEttr(const nlohmann::json& timeline, double window_s, int points);

}  // namespace bulwark::demo
