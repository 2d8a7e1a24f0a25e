#include "plane/journal_compaction.h"

#include <algorithm>
#include <map>
#include <set>

namespace bulwark::plane {

std::vector<int64_t> StepRowsToDrop(const std::vector<JournalEntry>& entries) {
  struct StepRow {
    int64_t seq, step;
    Time observed;
    std::string machine;  // the reporting agent, "" when none
  };
  std::vector<int64_t> drop;
  std::vector<StepRow> run;
  int64_t high_water = -1;  // the highest step before the run
  auto flush = [&] {
    // Keep first and last; for the rest, what replay needs.
    std::set<size_t> keep;
    if (!run.empty()) keep = {0, run.size() - 1};
    std::map<std::string, size_t> last_of;
    // Each row's ledger category: recomputation up to the high water,
    // productive past it. The same step seen again at the same instant (two
    // agents) closes nothing: it has its predecessor's category.
    auto repeat = [&](size_t k) {
      return k > 0 && run[k].step == run[k - 1].step && run[k].observed == run[k - 1].observed;
    };
    std::vector<bool> recompute(run.size());
    int64_t hw = high_water;
    for (size_t k = 0; k < run.size(); ++k) {
      recompute[k] = repeat(k) ? recompute[k - 1] : run[k].step <= hw;
      hw = std::max(hw, run[k].step);
    }
    for (size_t k = 0; k < run.size(); ++k) {
      last_of[run[k].machine] = k;
      if (k + 1 == run.size()) break;
      if (recompute[k] != recompute[k + 1]) keep.insert(k);
      // Out of order (a late report, an old run's): kept as they came.
      if (!repeat(k + 1) && (run[k + 1].observed < run[k].observed || run[k + 1].step <= run[k].step)) {
        keep.insert(k);
        keep.insert(k + 1);
      }
    }
    high_water = hw;
    for (const auto& [m, i] : last_of) keep.insert(i);
    for (size_t i = 0; i < run.size(); ++i)
      if (keep.count(i) == 0) drop.push_back(run[i].seq);
    run.clear();
  };
  for (const JournalEntry& e : entries) {
    Result<JournalRow> row = DecodeJournalRow(e.json);
    const bool step = row.ok() && row->type == "event" && row->event && KindOf(*row->event) == EventKind::kStepCompleted;
    if (!step) {
      flush();
      continue;
    }
    const auto& x = std::get<StepCompleted>(*row->event);
    run.push_back({e.seq, x.step, x.observed, row->origin ? row->origin->machine : std::string()});
  }
  flush();
  return drop;
}

Result<Controller> ReplayJournal(const JobSpec& spec, const PolicyConfig& policy,
                                 const std::vector<JournalEntry>& entries, const std::vector<int64_t>& drop) {
  const std::set<int64_t> skip(drop.begin(), drop.end());
  std::optional<Controller> c;
  Time last{};
  for (const JournalEntry& e : entries) {
    if (skip.count(e.seq) != 0) continue;
    const Time at = std::max(last, TimeFromMs(e.now_ms));
    last = at;
    Result<JournalRow> row = DecodeJournalRow(e.json);
    if (!row.ok()) return row.status();
    if (row->type == "create") {
      Result<Controller> made = Controller::Create(spec, policy, row->standbys, at, row->domains);
      if (!made.ok()) return made.status();
      c.emplace(std::move(*made));
    } else if (c && row->type == "reconcile") {
      BULWARK_RETURN_IF_ERROR(c->Reconcile(at).status());
    } else if (c && row->type == "events") {
      std::vector<std::pair<size_t, Status>> refused;
      BULWARK_RETURN_IF_ERROR(c->HandleAll(row->events, at, &refused).status());
    } else if (c && row->type == "event") {
      BULWARK_RETURN_IF_ERROR(c->Handle(*row->event, at).status());
    }
  }
  if (!c) return Status::NotFound("the journal has no creation row");
  return std::move(*c);
}

nlohmann::json ReplayFingerprint(const Controller& c, Time now) {
  nlohmann::json incidents = nlohmann::json::array();
  for (const Incident& i : c.incidents()) incidents.push_back(IncidentJson(i));
  nlohmann::json machines = nlohmann::json::object();
  for (const auto& [id, m] : c.state().machines) machines[id] = MachineStateName(m.state);
  nlohmann::json timeline = nlohmann::json::array();
  for (const LedgerSegment& s : c.Timeline(now)) {
    timeline.push_back({ToMs(s.start), ToMs(s.end), TimeCategoryName(s.category)});
  }
  return {{"incidents", incidents},
          {"cumulative", BreakdownJson(c.Cumulative(now))},
          {"timeline", timeline},
          {"placement", c.state().placement.slots},
          {"generation", c.state().placement.generation},
          {"job", JobStateName(c.state().job)},
          {"last_step", c.state().last_step},
          {"checkpoint_step", c.state().checkpoint_step},
          {"machines", machines}};
}

}  // namespace bulwark::plane
