#include "demo/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

namespace bulwark::demo {
namespace {

using nlohmann::json;

// Ledger categories in drawing order, with colours that stay apart for the
// colour-blind (productive green vs the warm fault colours, waiting blue).
struct Category {
  const char* name;
  const char* colour;
  const char* meaning;
};
const Category kCategories[] = {
    {"productive", "#2e9d57", "new steps"},
    {"startup", "#9aa5b1", "job start to first step"},
    {"detection", "#d64541", "fault to controller told"},
    {"localization", "#f08a24", "told to culprit named"},
    {"recovery", "#f2c12e", "restart decided to first step"},
    {"recomputation", "#8e44ad", "steps redone, partial steps lost"},
    {"waiting", "#3b6fd1", "no standby: waiting for a machine"},
    {"degraded", "#8fd3a8", "training on fewer replicas: the missing ones' share"},
    {"manual", "#555555", "operator restart"},
};

const char* ColourOf(const std::string& category) {
  for (const Category& c : kCategories) if (category == c.name) return c.colour;
  return "#000000";
}

std::string Fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// The pipe would break a Markdown table cell.
std::string Cell(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '|' ? '/' : c;
  return out;
}

Status Require(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return Status::InvalidArgument(std::string("report: run record lacks '") + key + "'");
  return Status::OK();
}

const json* FindIncident(const json& incidents, const json& id) {
  if (!id.is_number_integer()) return nullptr;
  for (const json& i : incidents) if (i.value("id", int64_t{-1}) == id.get<int64_t>()) return &i;
  return nullptr;
}

std::string Opt(const json& j, const char* key, const char* fmt) {
  return j.contains(key) && j[key].is_number() ? Fmt(fmt, j[key].get<double>()) : "–";
}

// The resolution, and for an elastic job that trained on narrower, on how
// many replicas and for how long.
std::string Resolution(const json& inc) {
  std::string r = inc.value("resolution", "");
  if (inc.contains("trained_on")) {
    // The controller names the eviction; nothing replaced the machine.
    if (r == "evicted_and_replaced") r = "evicted";
    r += ", then " + inc["trained_on"].dump() + " replicas" +
         (inc.contains("degraded_s") ? " for " + Opt(inc, "degraded_s", "%.1f s") : " to the end");
  }
  return r;
}

// Detection as the demo measures it: from the injection to the controller's
// incident. The incident's own detect_s starts at the fault time the agent
// reported, which for a repeated NIC flap is the first flap.
std::string DetectS(const json& entry, const json& inc, const char* fmt) {
  if (!entry.contains("at_ms") || !inc.contains("detected_ms")) return "–";
  return Fmt(fmt, std::max(0.0, (inc["detected_ms"].get<double>() - entry["at_ms"].get<double>()) / 1000));
}

// ---------------------------------------------------------------------------
// SVG timeline
// ---------------------------------------------------------------------------

struct Frame {
  double t0_ms, t1_ms;
  double left = 170, width = 880;
  double X(double ms) const { return left + width * std::clamp((ms - t0_ms) / std::max(1.0, t1_ms - t0_ms), 0.0, 1.0); }
};

void Rect(std::ostringstream& o, double x, double y, double w, double h, const char* fill, const std::string& title) {
  o << "<rect x='" << Fmt("%.1f", x) << "' y='" << y << "' width='" << Fmt("%.1f", std::max(w, 0.8)) << "' height='" << h
    << "' fill='" << fill << "'><title>" << Escape(title) << "</title></rect>\n";
}

void Text(std::ostringstream& o, double x, double y, const std::string& s, const char* extra = "") {
  o << "<text x='" << Fmt("%.1f", x) << "' y='" << y << "' " << extra << ">" << Escape(s) << "</text>\n";
}

std::string Svg(const json& run, const json& tl, double t0, double t1) {
  const Frame f{t0, t1};
  const json& schedule = run["schedule"];
  const json& incidents = run["incidents"];
  const json& cum = run["ledger"]["cumulative"];
  const double row_h = 24, ledger_y = 56, rows_y = 112;
  const double ettr_y = rows_y + row_h * schedule.size() + 24, ettr_h = 90;  // labels sit left of the plot
  const double axis_y = ettr_y + ettr_h + 6, legend_y = axis_y + 34;
  const double height = legend_y + 22 * 5 + 10;
  // Operator actions (a machine handed back) share the rows but are not faults.
  const auto faults = std::count_if(schedule.begin(), schedule.end(), [](const json& e) { return e["fault"] != "machine return"; });
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='1080' height='" << height << "' viewBox='0 0 1080 " << height
    << "' font-family='DejaVu Sans, Arial, sans-serif' font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n";
  Text(o, 10, 24,
       "ETTR " + Fmt("%.1f%%", 100 * cum.value("ettr", 0.0)) + " — " + Fmt("%.0f s", cum["seconds"].value("productive", 0.0)) +
           " productive of " + Fmt("%.0f s", cum.value("wall_s", 0.0)) + " wall, " + std::to_string(incidents.size()) +
           " incidents, " + std::to_string(faults) + " faults injected",
       "font-size='17' font-weight='bold'");

  // Where the time went: the ledger's own segments, one bar.
  Text(o, 10, ledger_y + 21, "time (ledger)", "font-weight='bold'");
  for (const json& s : tl) {
    const double a = s["start_ms"].get<double>(), b = s["end_ms"].get<double>();
    const std::string cat = s["category"].get<std::string>();
    Rect(o, f.X(a), ledger_y, f.X(b) - f.X(a), 32, ColourOf(cat),
         cat + " " + Fmt("%.1f s", (b - a) / 1000) + " at +" + Fmt("%.1f s", (a - t0) / 1000));
  }

  // One row per injected fault: its marker, the incident's phases, figures.
  // Backgrounds and marker lines first, so no line crosses a label.
  Text(o, 10, rows_y - 10, "faults injected", "font-weight='bold'");
  for (size_t r = 0; r < schedule.size(); ++r) {
    const double y = rows_y + r * row_h, x = f.X(schedule[r]["at_ms"].get<double>());
    if (r % 2 == 0) Rect(o, 0, y - 2, 1080, row_h, "#f4f6f8", "");
    o << "<line x1='" << Fmt("%.1f", x) << "' y1='" << ledger_y + 32 << "' x2='" << Fmt("%.1f", x) << "' y2='" << y + 4
      << "' stroke='#bbb' stroke-width='1' stroke-dasharray='2,3'/>\n";
  }
  for (size_t r = 0; r < schedule.size(); ++r) {
    const json& e = schedule[r];
    const double y = rows_y + r * row_h, at = e["at_ms"].get<double>();
    Text(o, 10, y + 15, std::to_string(r + 1) + ". " + e["fault"].get<std::string>() + " " + e["machine"].get<std::string>());
    const json* inc = FindIncident(incidents, e.value("incident", json()));
    std::string note;
    double note_x = f.X(at) + 8;
    if (inc == nullptr) {
      note = e.value("note", std::string("no incident: tolerated, training went on"));
      o << "<circle cx='" << Fmt("%.1f", f.X(at)) << "' cy='" << y + 10 << "' r='4' fill='#333'/>\n";
    } else {
      // The ledger's own segments from the injection until the lost steps
      // are redone: the same colours as the bar above, clipped to this fault.
      double end = inc->value("recovered_ms", (*inc)["detected_ms"].get<double>());
      // An elastic job that trained on narrower shows that interval too.
      if (inc->contains("trained_on")) end = inc->value("rejoined_ms", t1);
      for (const json& s : tl) {
        if (s["start_ms"].get<double>() <= end + 1 && s["end_ms"].get<double>() > end && s["category"] == "recomputation") {
          end = s["end_ms"].get<double>();
        }
      }
      for (const json& s : tl) {
        const double a = std::max(at, s["start_ms"].get<double>()), b = std::min(end, s["end_ms"].get<double>());
        if (b <= a) continue;
        const std::string cat = s["category"].get<std::string>();
        Rect(o, f.X(a), y + 2, f.X(b) - f.X(a), 16, ColourOf(cat), cat + " " + Fmt("%.1f s", (b - a) / 1000));
      }
      note_x = f.X(end) + 8;
      note = "#" + std::to_string((*inc)["id"].get<int64_t>()) + " " + Resolution(*inc) +
             ": detect " + DetectS(e, *inc, "%.2f s") + ", recover " + Opt(*inc, "recover_s", "%.1f s") +
             ", lost " + (inc->contains("lost_steps") ? (*inc)["lost_steps"].dump() : "?") + " steps";
      if (!inc->value("restore_source", "").empty()) note += " (" + (*inc)["restore_source"].get<std::string>() + ")";
      if (!inc->value("evicted", json::array()).empty()) note += ", evicted " + (*inc)["evicted"][0].get<std::string>();
    }
    // Late faults would run their note off the right edge: put it left.
    if (note_x > f.left + f.width - 360) {
      Text(o, f.X(at) - 8, y + 15, note, "text-anchor='end' fill='#222'");
    } else {
      Text(o, note_x, y + 15, note, "fill='#222'");
    }
  }

  // Sliding-window ETTR, so the dips read as what each incident cost.
  const double window_s = std::max(10.0, std::round((t1 - t0) / 1000 / 5));
  Text(o, 10, ettr_y + ettr_h / 2 - 4, "sliding ETTR", "font-weight='bold'");
  Text(o, 10, ettr_y + ettr_h / 2 + 12, Fmt("%.0f s", window_s) + " window", "fill='#666'");
  for (double v : {0.0, 0.5, 1.0}) {
    const double y = ettr_y + ettr_h * (1 - v);
    o << "<line x1='" << f.left << "' y1='" << y << "' x2='" << f.left + f.width << "' y2='" << y
      << "' stroke='#ccc' stroke-width='1'/>\n";
    Text(o, f.left - 6, y + 4, Fmt("%.0f%%", v * 100), "text-anchor='end' fill='#666'");
  }
  o << "<polyline fill='none' stroke='#2e9d57' stroke-width='2' points='";
  for (const json& p : SlidingEttr(tl, window_s, 240)) {
    o << Fmt("%.1f", f.X(t0 + p[0].get<double>() * 1000)) << "," << Fmt("%.1f", ettr_y + ettr_h * (1 - p[1].get<double>())) << " ";
  }
  o << "'/>\n";

  // Time axis: a tick every 15, 30, 60 or 120 s, whichever gives 6–12.
  const double span_s = (t1 - t0) / 1000;
  double tick = 15;
  for (double c : {15.0, 30.0, 60.0, 120.0, 300.0}) { tick = c; if (span_s / c <= 12) break; }
  o << "<line x1='" << f.left << "' y1='" << axis_y << "' x2='" << f.left + f.width << "' y2='" << axis_y << "' stroke='#333'/>\n";
  for (double s = 0; s <= span_s + 1e-9; s += tick) {
    const double x = f.X(t0 + s * 1000);
    o << "<line x1='" << Fmt("%.1f", x) << "' y1='" << axis_y << "' x2='" << Fmt("%.1f", x) << "' y2='" << axis_y + 5 << "' stroke='#333'/>\n";
    Text(o, x, axis_y + 18, Fmt("%.0f s", s), "text-anchor='middle' fill='#333'");
  }

  // Legend with each category's total.
  int k = 0;
  for (const Category& c : kCategories) {
    const double secs = cum["seconds"].value(c.name, 0.0);
    if (secs <= 0 && std::string(c.name) != "productive") continue;
    const double x = 10 + (k % 2) * 540, y = legend_y + (k / 2) * 22;
    Rect(o, x, y, 14, 14, c.colour, c.name);
    Text(o, x + 20, y + 12, std::string(c.name) + " " + Fmt("%.1f s", secs) + " (" +
                                Fmt("%.1f%%", 100 * secs / std::max(1e-9, cum.value("wall_s", 0.0))) + "): " + c.meaning);
    ++k;
  }
  o << "</svg>\n";
  return o.str();
}

std::string LedgerRows(const json& ledger, bool markdown) {
  std::ostringstream o;
  const json& cum = ledger["cumulative"];
  const json& win = ledger["window"];
  const double wall = std::max(1e-9, cum.value("wall_s", 0.0));
  o << (markdown ? "| time | seconds | share |\n|---|---:|---:|\n" : "");
  for (const Category& c : kCategories) {
    const double s = cum["seconds"].value(c.name, 0.0);
    if (s <= 0 && std::string(c.name) != "productive") continue;
    char line[160];
    std::snprintf(line, sizeof line, markdown ? "| %s | %.1f | %.1f%% |\n" : "  %-14s %8.1f s  %5.1f%%\n", c.name, s, 100 * s / wall);
    o << line;
  }
  char tail[240];
  if (markdown) {
    std::snprintf(tail, sizeof tail,
                  "| **wall** | %.1f | |\n\n**ETTR %.1f%%** cumulative; %.1f%% over the controller's %.0f s sliding window.\n",
                  wall, 100 * cum.value("ettr", 0.0), 100 * win.value("ettr", 0.0), ledger.value("window_s", 3600.0));
  } else {
    std::snprintf(tail, sizeof tail,
                  "  %-14s %8.1f s\n  ETTR %.1f%% cumulative, %.1f%% over the controller's %.0f s sliding window\n",
                  "wall", wall, 100 * cum.value("ettr", 0.0), 100 * win.value("ettr", 0.0), ledger.value("window_s", 3600.0));
  }
  o << tail;
  return o.str();
}

}  // namespace

json SlidingEttr(const json& timeline, double window_s, int points) {
  json out = json::array();
  if (!timeline.is_array() || timeline.empty() || points < 2) return out;
  const double t0 = timeline.front()["start_ms"].get<double>(), t1 = timeline.back()["end_ms"].get<double>();
  const double w = window_s * 1000;
  for (int i = 0; i < points; ++i) {
    const double now = t0 + (t1 - t0) * i / (points - 1);
    const double from = std::max(t0, now - w);
    double productive = 0;
    for (const json& s : timeline) {
      if (s["category"] != "productive") continue;
      productive += std::max(0.0, std::min(now, s["end_ms"].get<double>()) - std::max(from, s["start_ms"].get<double>()));
    }
    out.push_back({(now - t0) / 1000, now > from ? productive / (now - from) : 0.0});
  }
  return out;
}

// "3", or "0 (memory)" when the incident says where the restore came from.
std::string LostCell(const json& inc) {
  std::string cell = inc.contains("lost_steps") ? inc["lost_steps"].dump() : "?";
  if (inc.contains("restore_source") && !inc["restore_source"].get<std::string>().empty()) {
    cell += " (" + inc["restore_source"].get<std::string>() + ")";
  }
  return cell;
}

std::string RankList(const json& ranks) {
  std::string s;
  for (const json& r : ranks) s += (s.empty() ? "" : ",") + std::to_string(r.get<int>());
  return "{" + s + "}";
}

std::string IncidentTable(const json& incidents, const json& schedule) {
  std::ostringstream o;
  char line[512];
  std::snprintf(line, sizeof line, "  %-3s %-14s %-5s %-4s %-21s %8s %9s  %-14s %s\n", "#", "injected", "on", "inc", "resolution",
                "detect", "recover", "lost (from)", "cause");
  o << line;
  for (size_t r = 0; r < schedule.size(); ++r) {
    const json& e = schedule[r];
    const json* inc = FindIncident(incidents, e.value("incident", json()));
    if (inc == nullptr) {
      std::snprintf(line, sizeof line, "  %-3zu %-14s %-5s %-4s %s\n", r + 1, e["fault"].get<std::string>().c_str(),
                    e["machine"].get<std::string>().c_str(), "-", e.value("note", std::string("tolerated, no incident")).c_str());
    } else {
      std::snprintf(line, sizeof line, "  %-3zu %-14s %-5s %-4lld %-21s %8s %9s  %-14s %s\n", r + 1,
                    e["fault"].get<std::string>().c_str(), e["machine"].get<std::string>().c_str(),
                    static_cast<long long>((*inc)["id"].get<int64_t>()), Resolution(*inc).c_str(),
                    DetectS(e, *inc, "%.2f s").c_str(), Opt(*inc, "recover_s", "%.1f s").c_str(), LostCell(*inc).c_str(),
                    (*inc)["cause"].get<std::string>().substr(0, 90).c_str());
    }
    o << line;
  }
  return o.str();
}

std::string LedgerTable(const json& ledger) { return LedgerRows(ledger, false); }

Result<Report> RenderReport(const json& run) {
  for (const char* k : {"title", "schedule", "incidents", "ledger", "outcome", "setup"}) BULWARK_RETURN_IF_ERROR(Require(run, k));
  for (const char* k : {"cumulative", "window", "timeline"}) BULWARK_RETURN_IF_ERROR(Require(run["ledger"], k));
  const json& tl = run["ledger"]["timeline"];
  if (!tl.is_array() || tl.empty()) return Status::InvalidArgument("report: the ledger timeline is empty (did the job start?)");
  const double t0 = tl.front()["start_ms"].get<double>(), t1 = tl.back()["end_ms"].get<double>();
  const json& outcome = run["outcome"];
  const json& cum = run["ledger"]["cumulative"];

  Report rep;
  rep.svg = Svg(run, tl, t0, t1);

  std::ostringstream md;
  md << "# " << run["title"].get<std::string>() << "\n\n";
  md << "**" << (outcome.value("completed", false) ? "Training completed" : "Training did NOT complete") << "** at step "
     << outcome.value("step", 0) << (outcome.contains("loss") && outcome["loss"].is_number() ? Fmt(", loss %.3f", outcome["loss"].get<double>()) : "")
     << ". " << outcome.value("message", std::string()) << "\n\n";
  md << "ETTR **" << Fmt("%.1f%%", 100 * cum.value("ettr", 0.0)) << "**: " << Fmt("%.1f s", cum["seconds"].value("productive", 0.0))
     << " productive of " << Fmt("%.1f s", cum.value("wall_s", 0.0)) << " wall. Setup: " << run["setup"].dump() << "\n\n";
  md << "## Where the time went\n\n" << LedgerRows(run["ledger"], true) << "\n";
  md << "## Faults and incidents\n\n| # | injected | on | at | incident | resolution | detect | recover | lost steps | cause |\n"
     << "|---|---|---|---:|---|---|---:|---:|---:|---|\n";
  const json& schedule = run["schedule"];
  for (size_t r = 0; r < schedule.size(); ++r) {
    const json& e = schedule[r];
    const json* inc = FindIncident(run["incidents"], e.value("incident", json()));
    md << "| " << r + 1 << " | " << e["fault"].get<std::string>() << " | " << e["machine"].get<std::string>() << " | +"
       << Fmt("%.1f s", (e["at_ms"].get<double>() - t0) / 1000) << " | ";
    if (inc == nullptr) {
      md << "– | " << Cell(e.value("note", std::string("tolerated, no incident"))) << " | | | | |\n";
    } else {
      md << "#" << (*inc)["id"] << " | " << Resolution(*inc) << " | " << DetectS(e, *inc, "%.2f s")
         << " | " << Opt(*inc, "recover_s", "%.1f s") << " | " << LostCell(*inc)
         << " | " << Cell((*inc)["cause"].get<std::string>()) << " |\n";
    }
  }
  md << "\nDetect: injection to the controller's incident. Recover: the controller's restart decision to the "
        "first training step after it, including any wait for a machine. Lost steps: completed steps redone after "
        "resuming, and where the restored state came from (memory, the backup peer, durable storage, disk).\n";
  // Implicit incidents: how the analyzer grouped the ranks' stacks.
  for (const json& i : run["incidents"]) {
    if (!i.contains("stacks")) continue;
    md << "\n### Incident " << i["id"] << ": stack groups\n\n" << Cell(i["stacks"].value("why", "")) << "\n\n"
       << "| ranks | count | main thread, innermost first |\n|---|---:|---|\n";
    for (const json& g : i["stacks"]["groups"]) {
      md << "| " << RankList(g["ranks"]) << " | " << g["count"] << " | `" << Cell(g["stack"].get<std::string>()) << "` |\n";
    }
  }
  // Incidents that climbed the stop-time ladder: a row per rung.
  for (const json& i : run["incidents"]) {
    if (!i.contains("ladder")) continue;
    md << "\n### Incident " << i["id"] << ": the stop-time ladder\n\n| rung | started | seconds | outcome |\n"
       << "|---|---:|---:|---|\n";
    for (const json& r : i["ladder"]) {
      md << "| " << Cell(r.value("rung", "")) << " | +" << Fmt("%.1f s", (r.value("started_ms", 0.0) - t0) / 1000)
         << " | " << Opt(r, "seconds", "%.1f s") << " | " << Cell(r.value("outcome", "")) << " |\n";
    }
  }
  rep.markdown = md.str();

  // The page: the timeline first (it is the point), then the same tables.
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>" << Escape(run["title"].get<std::string>())
    << "</title>\n<style>body{font-family:'DejaVu Sans',Arial,sans-serif;margin:24px;color:#222;max-width:1120px}"
       "table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:left}"
       "th{background:#eef1f4}.ok{color:#2e7d32}.bad{color:#c62828}</style></head><body>\n";
  h << "<h1>" << Escape(run["title"].get<std::string>()) << "</h1>\n<p class='" << (outcome.value("completed", false) ? "ok" : "bad")
    << "'><b>" << (outcome.value("completed", false) ? "Training completed" : "Training did NOT complete") << "</b> at step "
    << outcome.value("step", 0) << ". " << Escape(outcome.value("message", std::string())) << "</p>\n";
  h << rep.svg;
  h << "<h2>Where the time went</h2>\n<table><tr><th>time</th><th>seconds</th><th>share</th><th>meaning</th></tr>\n";
  for (const Category& c : kCategories) {
    const double s = cum["seconds"].value(c.name, 0.0);
    h << "<tr><td><span style='color:" << c.colour << "'>&#9632;</span> " << c.name << "</td><td>" << Fmt("%.1f", s) << "</td><td>"
      << Fmt("%.1f%%", 100 * s / std::max(1e-9, cum.value("wall_s", 0.0))) << "</td><td>" << c.meaning << "</td></tr>\n";
  }
  h << "</table>\n<p>ETTR <b>" << Fmt("%.1f%%", 100 * cum.value("ettr", 0.0)) << "</b> cumulative, "
    << Fmt("%.1f%%", 100 * run["ledger"]["window"].value("ettr", 0.0)) << " over the controller's sliding window.</p>\n";
  h << "<h2>Incidents</h2>\n<table><tr><th>id</th><th>class</th><th>resolution</th><th>detect s</th><th>recover s</th>"
       "<th>lost steps</th><th>cause</th><th>why</th></tr>\n";
  for (const json& i : run["incidents"]) {
    json entry = json::object();  // the injection that opened it, if any
    for (const json& e : run["schedule"]) if (e.value("incident", json()) == i["id"]) entry = e;
    h << "<tr><td>" << i["id"] << "</td><td>" << Escape(i.value("class", "")) << "</td><td>" << Escape(Resolution(i))
      << "</td><td>" << DetectS(entry, i, "%.2f") << "</td><td>" << Opt(i, "recover_s", "%.1f") << "</td><td>"
      << Escape(LostCell(i)) << "</td><td>" << Escape(i.value("cause", ""))
      << "</td><td>" << Escape(i.value("why", "")) << "</td></tr>\n";
  }
  h << "</table>\n";
  for (const json& i : run["incidents"]) {
    if (!i.contains("stacks")) continue;
    h << "<h3>Incident " << i["id"] << ": stack groups</h3>\n<p>" << Escape(i["stacks"].value("why", "")) << "</p>\n"
      << "<table><tr><th>ranks</th><th>count</th><th>main thread, innermost first</th></tr>\n";
    for (const json& g : i["stacks"]["groups"]) {
      h << "<tr><td>" << RankList(g["ranks"]) << "</td><td>" << g["count"] << "</td><td><code>"
        << Escape(g["stack"].get<std::string>()) << "</code></td></tr>\n";
    }
    h << "</table>\n";
  }
  for (const json& i : run["incidents"]) {
    if (!i.contains("ladder")) continue;
    h << "<h3>Incident " << i["id"] << ": the stop-time ladder</h3>\n"
      << "<table><tr><th>rung</th><th>started</th><th>seconds</th><th>outcome</th></tr>\n";
    for (const json& r : i["ladder"]) {
      h << "<tr><td>" << Escape(r.value("rung", "")) << "</td><td>+"
        << Fmt("%.1f s", (r.value("started_ms", 0.0) - t0) / 1000) << "</td><td>" << Opt(r, "seconds", "%.1f")
        << "</td><td>" << Escape(r.value("outcome", "")) << "</td></tr>\n";
    }
    h << "</table>\n";
  }
  h << "<p>Setup: <code>" << Escape(run["setup"].dump()) << "</code></p>\n</body></html>\n";
  rep.html = h.str();
  return rep;
}

}  // namespace bulwark::demo
