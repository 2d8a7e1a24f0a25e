// The stop-time ladder's rules (ladder.h has the states, the table and the
// pure verdicts; policy.cc calls in through policy_internal.h).
#include <algorithm>
#include <tuple>

#include "controller/ladder.h"
#include "controller/policy.h"
#include "controller/policy_internal.h"

namespace bulwark::controller::internal {

// ---------------------------------------------------------------------------
// The stop-time ladder (ladder.h): diagnose -> reattempt -> rollback -> replay
// ---------------------------------------------------------------------------

namespace {

std::string JoinIds(const std::vector<MachineId>& ids) {
  std::string s;
  for (const MachineId& m : ids) s += (s.empty() ? "" : ", ") + m;
  return s;
}

void EndRung(Incident& inc, Time now, const std::string& outcome) {
  if (inc.rungs.empty() || inc.rungs.back().ended) return;
  inc.rungs.back().ended = now;
  inc.rungs.back().outcome = outcome;
}

// Sends RunDiagnostics for `tests` to every machine of the job and holds
// the job until they answered or the budget ran out. The network test's
// links travel as the action's groups ("net<i>", in the order the agents
// must run them: NetworkLinkRound).
Status StartDiagnose(RuleContext& ctx, Incident& inc, int rung, const std::vector<std::string>& tests) {
  ClusterState& s = ctx.state;
  LadderStatus& l = s.ladder;
  BULWARK_RETURN_IF_ERROR(l.Move(LadderInput::kDiagnose));
  l.machines = s.placement.slots;
  l.answered_prefix = 0;
  l.answers.assign(l.machines.size(), MachineDiagnostics{});
  l.answered.assign(l.machines.size(), 0);
  l.answers_in = 0;
  l.status.of.clear();
  l.links.clear();
  l.deadline = ctx.now + ctx.config.ladder.diagnose_budget;
  inc.rungs.push_back({"diagnose", ctx.now, std::nullopt, ""});
  Action a = RunDiagnosticsAction(inc.id, rung, s.placement, tests, ctx.config.ladder.diagnose_budget, inc.why);
  if (std::find(tests.begin(), tests.end(), "network") != tests.end()) {
    l.links = NetworkLinks(l.machines);
    std::vector<std::tuple<int, int, std::string>> order;  // (round, index, name)
    const int count = static_cast<int>(l.links.size());
    for (const auto& [name, ends] : l.links) {
      const int index = NetworkLinkIndex(name);
      order.emplace_back(NetworkLinkRound(index, count), index, name);
    }
    std::sort(order.begin(), order.end());
    for (const auto& [round, index, name] : order) {
      a.group_names.push_back(name);
      a.groups.push_back(l.links[name]);
    }
  }
  return Emit(ctx, std::move(a));
}

// Climbs to the first enabled rung at or after `from` that applies, in the
// same decision: diagnose and replay wait for results (the ladder holds the
// job), reattempt restarts and watches, rollback is recorded and passed,
// and past the last rung the job stops.
Status ClimbFrom(RuleContext& ctx, Incident& inc, int from) {
  ClusterState& s = ctx.state;
  LadderStatus& l = s.ladder;
  const LadderConfig& cfg = ctx.config.ladder;
  l.incident = inc.id;
  for (int i = std::max(from, 0); i < static_cast<int>(cfg.rungs.size()); ++i) {
    const std::string& rung = cfg.rungs[i];
    l.rung = i;
    if (rung == "diagnose") {
      inc.why = "stopped for diagnostics on " + std::to_string(s.placement.slots.size()) + " machine(s): " + l.trigger;
      return StartDiagnose(ctx, inc, i, cfg.tests);
    }
    if (rung == "reattempt") {
      if (l.reattempted) continue;  // the trigger already followed a reattempt
      BULWARK_RETURN_IF_ERROR(l.Move(LadderInput::kRestart));
      l.reattempted = true;
      inc.rungs.push_back({rung, ctx.now, ctx.now, "restarted in place"});
      inc.resolution = Resolution::kReattempt;
      inc.why = "reattempt in place (ladder): " + l.trigger;
      s.restart_pending = true;
      s.restart_reason = "ladder: " + l.trigger;
      return Status::OK();
    }
    if (rung == "rollback") {
      Result<bool> rolled = RollBackForLadder(ctx, inc);
      if (!rolled.ok()) return rolled.status();
      if (*rolled) return Status::OK();  // watches the restart like a reattempt
      continue;
    }
    if (rung == "replay") {
      const int machines = static_cast<int>(s.placement.slots.size());
      const int pp = std::max(1, s.spec.pp);
      Result<ReplayPlan> plan = PlanReplay(machines, machines % pp == 0 ? pp : 1, cfg.replay_k);
      if (!plan.ok() || plan->horizontal.size() < 2 || plan->vertical.size() < 2) {
        inc.rungs.push_back({rung, ctx.now, ctx.now,
                             "cannot replay: " + (plan.ok() ? std::string("fewer than 2x2 groups") : plan.status().message())});
        continue;
      }
      BULWARK_RETURN_IF_ERROR(l.Move(LadderInput::kReplay));
      l.machines = s.placement.slots;
      l.answered_prefix = 0;
  l.answered_prefix = 0;
      l.replay_results.clear();
      l.deadline = ctx.now + cfg.replay_budget;
      Action a = RunDiagnosticsAction(inc.id, i, s.placement, {"replay"}, cfg.replay_budget,
                                      "dual-phase replay: " + l.trigger);
      for (size_t h = 0; h < plan->horizontal.size(); ++h) {
        a.group_names.push_back("h" + std::to_string(h));
        a.groups.emplace_back();
        for (int slot : plan->horizontal[h]) a.groups.back().push_back(s.placement.slots[slot]);
      }
      for (size_t v = 0; v < plan->vertical.size(); ++v) {
        a.group_names.push_back("v" + std::to_string(v));
        a.groups.emplace_back();
        for (int slot : plan->vertical[v]) a.groups.back().push_back(s.placement.slots[slot]);
      }
      inc.rungs.push_back({rung, ctx.now, std::nullopt, ""});
      inc.why = "dual-phase replay on " + std::to_string(plan->horizontal.size()) + " horizontal and " +
                std::to_string(plan->vertical.size()) + " vertical groups: " + l.trigger;
      return Emit(ctx, std::move(a));
    }
  }
  // Out of rungs: what the ladder could not pin on a machine is the job's.
  BULWARK_RETURN_IF_ERROR(l.Move(LadderInput::kExhausted));
  l.deadline.reset();
  inc.why = "stopped: the stop-time ladder found no faulty machine (" + l.trigger +
            "): deterministic, so the data, the model or the code, not a machine; inspect the step's batch, the "
            "learning rate and recent code changes, then resubmit";
  inc.resolution = Resolution::kStopped;
  return Emit(ctx, StopJobAction(inc.id, inc.why));
}

Incident* LadderIncident(RuleContext& ctx, int64_t id) {
  Incident* inc = ctx.state.incidents.Current();
  return inc != nullptr && inc->id == id ? inc : nullptr;
}

// Whether the machine at `pos` of the round (l.machines) is active, through
// LadderStatus::status, found for the whole round at its first use.
bool AskedIsActive(const ClusterState& state, LadderStatus& l, size_t pos) {
  if (l.status.of.size() != l.machines.size()) {
    l.status.of.clear();
    for (const MachineId& m : l.machines) l.status.of.push_back(state.FindMachine(m));
  }
  const MachineStatus* m = l.status.of[pos];
  return m != nullptr && m->state == MachineState::kActive;
}

Status FinishDiagnose(RuleContext& ctx, Incident& inc, const std::string& budget_note) {
  LadderStatus& l = ctx.state.ladder;
  std::vector<MachineId> still;  // a machine evicted meanwhile is judged no more
  std::vector<const MachineDiagnostics*> answers;
  for (size_t i = 0; i < l.machines.size(); ++i) {
    if (!AskedIsActive(ctx.state, l, i)) continue;
    still.push_back(l.machines[i]);
    answers.push_back(l.answered[i] ? &l.answers[i] : nullptr);
  }
  // The links are judged on every answer by machine, those of machines
  // evicted meanwhile too; only a network test has links.
  std::map<MachineId, MachineDiagnostics> reports;
  for (size_t i = 0; i < l.machines.size() && !l.links.empty(); ++i) {
    if (l.answered[i]) reports.emplace(l.machines[i], l.answers[i]);
  }
  const DiagnosticsVerdict v = JudgeAnswers(still, answers, reports, ctx.config.ladder, budget_note, l.links);
  l.deadline.reset();
  EndRung(inc, ctx.now, v.why);
  if (l.periodic && (v.failed.empty() || v.inconclusive)) {
    // A routine check that found nothing is no fault: the job goes on in
    // place, and the ladder is not started by it.
    BULWARK_RETURN_IF_ERROR(l.Move(LadderInput::kExhausted));
    inc.resolution = Resolution::kReattempt;
    inc.why = l.check + ": " + v.why + "; restarted in place";
    ctx.state.restart_pending = true;
    ctx.state.restart_reason = l.check + " done";
    return Status::OK();
  }
  if (v.failed.empty() || v.inconclusive) return ClimbFrom(ctx, inc, l.rung + 1);
  BULWARK_RETURN_IF_ERROR(l.Move(LadderInput::kRestart));
  std::vector<MachineId> bad;
  for (const auto& [m, why] : v.failed) bad.push_back(m);
  return OverEvict(ctx, inc, bad, "evicted " + JoinIds(bad) + " by stop-time diagnostics: " + v.why);
}

Status FinishReplay(RuleContext& ctx, Incident& inc, const std::string& budget_note) {
  LadderStatus& l = ctx.state.ladder;
  const int machines = static_cast<int>(ctx.state.placement.slots.size());
  const int pp = std::max(1, ctx.state.spec.pp);
  Result<ReplayPlan> plan = PlanReplay(machines, machines % pp == 0 ? pp : 1, ctx.config.ladder.replay_k);
  std::vector<int> fh, fv;
  std::string failed;
  if (plan.ok()) {
    for (size_t h = 0; h < plan->horizontal.size(); ++h) {
      auto it = l.replay_results.find("h" + std::to_string(h));
      if (it != l.replay_results.end() && !it->second) fh.push_back(static_cast<int>(h));
    }
    for (size_t v = 0; v < plan->vertical.size(); ++v) {
      auto it = l.replay_results.find("v" + std::to_string(v));
      if (it != l.replay_results.end() && !it->second) fv.push_back(static_cast<int>(v));
    }
  }
  for (int h : fh) failed += (failed.empty() ? "h" : ", h") + std::to_string(h);
  for (int v : fv) failed += (failed.empty() ? "v" : ", v") + std::to_string(v);
  l.deadline.reset();
  std::optional<int> slot = plan.ok() ? ReplayCulprit(*plan, fh, fv) : std::nullopt;
  if (!slot) {
    EndRung(inc, ctx.now, "no single culprit (failing groups: " + (failed.empty() ? "none" : failed) + ")" + budget_note);
    return ClimbFrom(ctx, inc, l.rung + 1);
  }
  const MachineId culprit = ctx.state.placement.slots[*slot];
  EndRung(inc, ctx.now, "culprit " + culprit + " (h" + std::to_string(fh[0]) + " x v" + std::to_string(fv[0]) + ")");
  BULWARK_RETURN_IF_ERROR(l.Move(LadderInput::kRestart));
  return OverEvict(ctx, inc, {culprit},
                   "evicted " + culprit + " by dual-phase replay: the only machine in both failing groups (h" +
                       std::to_string(fh[0]) + ", v" + std::to_string(fv[0]) + ")");
}

}  // namespace

// A fault with no culprit: start the ladder, or, while it watches a restart
// it decided, climb to the next rung. Faults during diagnostics or a replay
// never reach here (the ladder holds the job).
Status EnterLadder(RuleContext& ctx, Incident& inc, const std::string& trigger, int64_t step, bool reattempted) {
  LadderStatus& l = ctx.state.ladder;
  inc.localized = inc.localized.value_or(ctx.now);
  if (l.state == LadderState::kWatching) {
    inc.notes.push_back("ladder: the fault came back while watching (" + trigger + "): climbing on");
    l.trigger = trigger + " (first: " + l.trigger + ")";
    return ClimbFrom(ctx, inc, l.rung + 1);
  }
  l = LadderStatus{};
  l.trigger = trigger;
  l.trigger_step = step;
  l.reattempted = reattempted;
  inc.notes.push_back("ladder: " + trigger);
  return ClimbFrom(ctx, inc, 0);
}


namespace {

// A routine check, not a fault: one test on every machine at once, as a
// diagnose rung of an incident of its own. A machine it fails is evicted
// and the ladder watches, as after any diagnose rung; nothing found
// restarts in place (FinishDiagnose).
Status StartRoutineCheck(RuleContext& ctx, const std::string& cause, const std::string& check,
                         const std::string& trigger, const std::string& stopped_for, const std::string& test) {
  ClusterState& s = ctx.state;
  Result<Incident*> opened = OpenIncident(ctx, IncidentClass::kImplicit, cause, std::nullopt, /*localized=*/false);
  if (!opened.ok()) return opened.status();
  Incident& inc = **opened;
  LadderStatus& l = s.ladder;
  l = LadderStatus{};
  l.periodic = true;
  l.check = check;
  l.trigger = trigger;
  l.trigger_step = s.last_step;
  l.incident = inc.id;
  l.rung = -1;  // no rung of the configured ladder: a fault it finds climbs from the first
  inc.notes.push_back("ladder: " + l.trigger);
  inc.why = stopped_for + " " + std::to_string(s.placement.slots.size()) + " machine(s)";
  return StartDiagnose(ctx, inc, -1, {test});
}

}  // namespace

// Steps slowed while compute held (FailSlowDetector::CheckLinks): the
// ladder's network test measures every link of the ring, whatever tests
// the diagnose rung is configured with, as a check of its own incident.
// The machine on the outlier links is evicted; nothing found restarts in
// place.
Status StartLinkCheck(RuleContext& ctx, const FailSlowSuspected& x) {
  return StartRoutineCheck(ctx, x.detail, "network check", "network check: " + x.detail,
                           "stopped to measure the links of", "network");
}

bool LinkCheckIsDue(const ClusterState& s, const PolicyConfig& config) {
  return LadderEnabled(config) && s.job == JobState::kRunning && s.ladder.state == LadderState::kIdle &&
         s.incidents.Current() == nullptr && s.placement.slots.size() >= 2;
}

Status OnDiagnosticsReported(RuleContext& ctx, const Event& e) {
  const auto& x = std::get<DiagnosticsReported>(e);
  // The periodic bitwise check answers beside the ranks, and an over-evicted
  // machine's checkup off the job's path: neither to the ladder.
  Result<bool> periodic = AlignCheckAnswered(ctx, x);
  if (!periodic.ok() || *periodic) return periodic.status();
  Result<bool> checkup = CheckupAnswered(ctx, x);
  if (!checkup.ok() || *checkup) return checkup.status();
  LadderStatus& l = ctx.state.ladder;
  Incident* inc = LadderIncident(ctx, x.incident);
  // Late answers for a rung already decided (its budget ran out) are kept out.
  if (inc == nullptr || l.incident != x.incident) return Status::OK();
  if (l.state == LadderState::kDiagnosing) {
    // Where the answer's machine is in l.machines (the placement's slots):
    // answers in slot order are the cursor's machine, found with no lookup;
    // else a machine's own slot finds it without a scan (12,500 answers each
    // scanning 12,500 slots took minutes of a simulated year).
    size_t pos = l.machines.size();
    if (l.answered_prefix < l.machines.size() && l.machines[l.answered_prefix] == x.machine) {
      pos = l.answered_prefix;
    } else if (const MachineStatus* ms = ctx.state.FindMachine(x.machine);
               ms != nullptr && ms->slot >= 0 && ms->slot < static_cast<int>(l.machines.size()) &&
               l.machines[ms->slot] == x.machine) {
      pos = static_cast<size_t>(ms->slot);
    } else {
      pos = static_cast<size_t>(std::find(l.machines.begin(), l.machines.end(), x.machine) - l.machines.begin());
    }
    if (pos == l.machines.size()) return Status::OK();  // not asked
    if (l.answered.size() != l.machines.size()) {
      l.answered.assign(l.machines.size(), 0);
      l.answers.assign(l.machines.size(), MachineDiagnostics{});
    }
    l.answers_in += l.answered[pos] ? 0 : 1;
    l.answered[pos] = 1;
    l.answers[pos] = MachineDiagnostics{x.results, x.alignment_hash};  // a repeat replaces
    // Machines before the cursor answered (or left the job): each is looked
    // at once per round of diagnostics, not once per answer.
    for (; l.answered_prefix < l.machines.size(); ++l.answered_prefix) {
      if (l.answered_prefix == pos) continue;  // this answer: no lookup
      if (!l.answered[l.answered_prefix] && AskedIsActive(ctx.state, l, l.answered_prefix)) {
        return Status::OK();  // more to come
      }
    }
    return FinishDiagnose(ctx, *inc, "");
  }
  if (l.state == LadderState::kReplaying) {
    for (const DiagnosticResult& r : x.results) {
      if (r.test.rfind("replay/", 0) == 0) l.replay_results[r.test.substr(7)] = r.passed;
    }
    const int machines = static_cast<int>(ctx.state.placement.slots.size());
    const int pp = std::max(1, ctx.state.spec.pp);
    Result<ReplayPlan> plan = PlanReplay(machines, machines % pp == 0 ? pp : 1, ctx.config.ladder.replay_k);
    const size_t groups = plan.ok() ? plan->horizontal.size() + plan->vertical.size() : 0;
    if (l.replay_results.size() < groups) return Status::OK();
    return FinishReplay(ctx, *inc, "");
  }
  return Status::OK();
}

Status OnLadderDeadline(RuleContext& ctx, const Event& e) {
  const auto& x = std::get<LadderDeadline>(e);
  LadderStatus& l = ctx.state.ladder;
  Incident* inc = LadderIncident(ctx, x.incident);
  if (l.incident != x.incident || !l.deadline || x.observed < *l.deadline) return Status::OK();
  if (inc == nullptr) {
    // The episode ended under the ladder (it should not: steps and faults
    // wait while it holds the job). Let go rather than hold the job, and
    // its stopped ranks, forever; restart in place.
    BULWARK_RETURN_IF_ERROR(l.Move(LadderInput::kExhausted));
    l.deadline.reset();
    ctx.state.restart_pending = true;
    ctx.state.restart_reason = "the stop-time ladder lost its incident";
    return Status::OK();
  }
  if (l.state == LadderState::kDiagnosing) {
    return FinishDiagnose(ctx, *inc, " within " + FormatDuration(ctx.config.ladder.diagnose_budget));
  }
  if (l.state == LadderState::kReplaying) {
    return FinishReplay(ctx, *inc, "; budget " + FormatDuration(ctx.config.ladder.replay_budget) + " ran out");
  }
  return Status::OK();
}

}  // namespace bulwark::controller::internal
