// The periodic bitwise check, beside the ranks (LadderConfig::align_every).
//
// A machine whose arithmetic drifts silently (an ALU or an HBM cell that
// now and then returns a slightly wrong result: no NaN, no spike) opens no
// incident, since nothing it computes looks wrong on its own. So every
// align_every the controller asks each machine of the job to run the
// alignment test (one fixed training step of the job's model,
// trainer/diag/align.h) beside its ranks. The ranks keep training, and
// every healthy machine computes the same hash, bit for bit.
//
//   start   AlignmentCheckDue while the job runs with nothing open: one
//           kAlignCheck action (a DIAGNOSE one-shot per machine, with
//           `check` set, which the agent runs without stopping its ranks).
//   answer  DiagnosticsReported with that `check`: a hash, or why the run
//           made none. The check ends when every machine asked answered,
//           or at its deadline (the ladder's diagnose budget) with the
//           answers in.
//   judge   among the machines still in the job that gave a hash, the hash
//           of a strict majority is the right one, and a machine with
//           another is evicted for it (an implicit incident, localized;
//           Reconcile puts a standby in its slot).
//   rollback  the drift reached every replica's weights through the
//           gradient reduction since it began, after the last clean check
//           started: the restart restores at most that check's step
//           (ClusterState::rollback_to; each check asks the agents to keep
//           the persisted steps this needs, Action::keep_steps).
//
// A GPU machine's run also compares its own GPUs with each other: one
// whose GPUs disagreed is evicted on its own word, majority or not.
//
// No strict majority (two machines, or a split) evicts nobody else. A run that
// made no hash is noted and not held against its machine: it ran beside a
// training job, and a test that could not run is no evidence.
//
// The check used to stop the job and run as a diagnose rung of an incident
// of its own, so each clean check cost a stop and a restart; which is why
// it is still off by default, and could now be on.
#include <map>

#include "controller/policy.h"
#include "controller/policy_internal.h"

namespace bulwark::controller {

bool AlignmentCheckIsDue(const ClusterState& s, const LadderConfig& config, Time now) {
  if (s.align.id != 0) return now >= s.align.deadline;  // the one in flight ran out of time
  return config.align_every.count() > 0 && s.job == JobState::kRunning && s.ladder.state == LadderState::kIdle &&
         s.incidents.Current() == nullptr && s.align_check_from && now - *s.align_check_from >= config.align_every &&
         !s.placement.slots.empty();
}

namespace internal {
namespace {

std::string Short(const std::string& hash) { return hash.substr(0, 16); }

// Judges the check in flight on the answers in (`note`: why some are missing).
Status FinishAlignCheck(RuleContext& ctx, const std::string& note) {
  ClusterState& s = ctx.state;
  AlignCheckState& c = s.align;
  const std::string name = "periodic bitwise check " + std::to_string(c.id);
  std::map<MachineId, std::string> hashes;  // of the machines still in the job
  std::map<std::string, int> count;
  for (const auto& [m, h] : c.hashes) {
    const MachineStatus* ms = s.FindMachine(m);
    if (ms == nullptr || ms->state != MachineState::kActive) continue;
    hashes.emplace(m, h);
    ++count[h];
  }
  const std::string majority = StrictMajority(count);
  std::string aside;
  if (!c.failed.empty()) {
    aside += "; " + std::to_string(c.failed.size()) + " machine(s) made no hash (" + c.failed.begin()->first + ": " +
             c.failed.begin()->second + ")";
  }
  if (!c.waiting.empty()) aside += "; " + std::to_string(c.waiting.size()) + " did not answer" + note;
  std::vector<MachineId> bad;
  std::string why;
  // A machine whose own GPUs disagreed is at fault whatever the others
  // computed (trainer/diag/align.h): no majority needed.
  for (const auto& [m, detail] : c.own) {
    const MachineStatus* ms = s.FindMachine(m);
    if (ms == nullptr || ms->state != MachineState::kActive) continue;
    bad.push_back(m);
    why += (why.empty() ? "" : "; ") + m + ": " + detail;
  }
  c.id = 0;
  c.waiting.clear();
  c.failed.clear();
  c.own.clear();
  const std::string of = " of " + std::to_string(hashes.size()) + " machine(s)";
  if (bad.empty() && (hashes.empty() || majority.empty())) {
    c.last = name + ": " + (hashes.empty() ? "no hash came back" : "no strict majority among the hashes" + of) +
             "; nobody evicted" + aside;
    c.hashes.clear();
    return Status::OK();
  }
  for (const auto& [m, h] : hashes) {
    if (majority.empty() || h == majority) continue;
    bad.push_back(m);
    why += (why.empty() ? "" : "; ") + m + ": alignment hash " + Short(h) + " differs from the majority's " +
           Short(majority) + " (" + std::to_string(count[majority]) + of + ")";
  }
  c.hashes.clear();
  if (bad.empty()) {
    ++c.clean;
    c.clean_step = c.from_step;
    c.last = name + ": all " + std::to_string(hashes.size()) + " machine(s) agree (" + Short(majority) + ")" + aside;
    return Status::OK();
  }
  c.last = name + ": " + why + aside;
  if (s.job == JobState::kStopped) {
    c.last += "; the job had stopped: nobody evicted";
    return Status::OK();
  }
  Result<Incident*> inc = OpenIncident(ctx, IncidentClass::kImplicit, name, std::nullopt, /*localized=*/true);
  if (!inc.ok()) return inc.status();
  (*inc)->notes.push_back(c.last);
  // The drift has reached the weights through the gradient reduction since
  // it began, which was after the last clean check started: the restart
  // goes back there. An elastic job's survivors keep their state in their
  // processes, which a rollback would have to discard: not built.
  if (s.spec.elastic()) {
    (*inc)->notes.push_back("not rolled back (an elastic job): the steps since the last clean check may hold the drift");
  } else {
    s.rollback_to = c.clean_step;
    (*inc)->notes.push_back("rolled back to step " + std::to_string(c.clean_step) + " at most (" +
                            (c.clean_step > 0 ? "the last clean check's start" : "no clean check yet: from the start") +
                            "): the steps after it may hold the drift");
  }
  return OverEvict(ctx, **inc, bad, "evicted by the " + name + " beside the ranks: " + why);
}

}  // namespace

Status OnAlignmentCheckDue(RuleContext& ctx, const Event& e) {
  const auto& x = std::get<AlignmentCheckDue>(e);
  ClusterState& s = ctx.state;
  if (!AlignmentCheckIsDue(s, ctx.config.ladder, x.observed)) return Status::OK();  // a repeat, or too late
  const Duration budget = ctx.config.ladder.diagnose_budget;
  if (s.align.id != 0) return FinishAlignCheck(ctx, " within " + FormatDuration(budget));
  s.align_check_from = ctx.now;
  AlignCheckState& c = s.align;
  c.id = ++c.started;
  c.from_step = s.last_step;
  c.deadline = ctx.now + budget;
  c.waiting = std::set<MachineId>(s.placement.slots.begin(), s.placement.slots.end());
  c.hashes.clear();
  c.failed.clear();
  c.own.clear();
  Action a = AlignCheckAction(c.id, s.placement, budget,
                              "periodic bitwise check " + std::to_string(c.id) + " (every " +
                                  FormatDuration(ctx.config.ladder.align_every) + "), beside the ranks of " +
                                  std::to_string(s.placement.slots.size()) + " machine(s)");
  a.keep_steps = {c.clean_step, c.from_step};  // what a rollback may need, whichever this check finds
  return Emit(ctx, std::move(a));
}

Result<bool> AlignCheckAnswered(RuleContext& ctx, const DiagnosticsReported& x) {
  if (x.check == 0) return false;
  AlignCheckState& c = ctx.state.align;
  // A late answer (its check was judged at the deadline), or a machine not asked.
  if (x.check != c.id || c.waiting.erase(x.machine) == 0) return true;
  const DiagnosticResult* run = nullptr;
  for (const DiagnosticResult& r : x.results) {
    if (r.test == "alignment") run = &r;
  }
  if (!x.alignment_hash.empty() && run != nullptr && !run->passed) {
    c.own[x.machine] = run->detail;  // a hash, and a verdict of its own: its GPUs disagreed
  } else if (!x.alignment_hash.empty()) {
    c.hashes[x.machine] = x.alignment_hash;
  } else {
    c.failed[x.machine] = run == nullptr ? "no alignment result" : run->detail.empty() ? "failed" : run->detail;
  }
  if (!c.waiting.empty()) return true;
  BULWARK_RETURN_IF_ERROR(FinishAlignCheck(ctx, ""));
  return true;
}

}  // namespace internal
}  // namespace bulwark::controller
