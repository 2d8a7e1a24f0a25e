// Checkups: what is evicted on suspicion comes back (issue 38 item 5).
//
// Fast isolation over precise localization evicts a hang's, a slow
// machine's or an anomaly's whole parallel group: a pipeline of ten
// machines for one stuck GPU. At 100k GPUs that was a fifth of the fleet
// a year, and none of it came back. The rule (PolicyConfig::checkup_evicted):
//
//   check   each machine OverEvict took on suspicion gets a Checkup: the
//           ladder's tests (checkup_tests) on that one machine, off the
//           job's path: the job is already training on its replacement.
//   return  every test passed: the machine goes kEvicted -> kJoining ->
//           kStandby, back in the pool, with no operator.
//   keep    a test failed or is missing: it stays evicted, an operator's
//           machine, as before.
//
// A machine evicted for a fault of its own (a lost heartbeat, a failed
// inspection, a failed diagnostics rung) gets no checkup: the evidence
// is already against it. The alignment test on one machine compares its
// result with the deterministic workload's known-good one (no majority).
#include <algorithm>

#include "controller/policy_internal.h"

namespace bulwark::controller::internal {

Status CheckUp(RuleContext& ctx, MachineStatus& machine, int64_t incident) {
  SetCheckup(ctx.state, machine, incident);
  std::string tests;
  for (const std::string& t : ctx.config.checkup_tests) tests += (tests.empty() ? "" : ", ") + t;
  return Emit(ctx, CheckupAction(machine.id, incident, ctx.config.checkup_tests,
                                 "over-evicted on suspicion for incident " + std::to_string(incident) +
                                     ": checkup off the job's path (" + tests + ")"));
}

namespace {

// The checkup tests `x` failed or did not answer, with their details; empty: all passed.
std::string FailedTests(const std::vector<std::string>& tests, const DiagnosticsReported& x) {
  std::string failed;
  for (const std::string& t : tests) {
    auto r = std::find_if(x.results.begin(), x.results.end(), [&](const DiagnosticResult& d) { return d.test == t; });
    if (r != x.results.end() && r->passed) continue;
    failed += (failed.empty() ? "" : "; ") + t +
              (r == x.results.end() ? ": no answer" : r->detail.empty() ? ": failed" : ": " + r->detail);
  }
  return failed;
}

}  // namespace

Result<bool> CheckupAnswered(RuleContext& ctx, const DiagnosticsReported& x) {
  if (ctx.state.checkups_in_flight == 0) return false;  // no lookup for a round's 12,500 answers
  MachineStatus* m = ctx.state.FindMachine(x.machine);
  if (m == nullptr || m->checkup == 0 || m->checkup != x.incident) return false;
  SetCheckup(ctx.state, *m, 0);
  if (m->state != MachineState::kEvicted) return true;  // an operator or its switch brought it back first
  const std::string incident = "incident " + std::to_string(x.incident);
  if (const std::string failed = FailedTests(ctx.config.checkup_tests, x); !failed.empty()) {
    m->last_reason = "over-evicted for " + incident + "; its checkup failed (" + failed + "): an operator's machine";
    ++ctx.state.checkups_failed;
    return true;
  }
  // Its flaps and crashes were before a clean checkup: they say nothing now.
  m->network_alerts.clear();
  m->crashes.clear();
  ++ctx.state.checkups_passed;
  BULWARK_RETURN_IF_ERROR(SetMachineState(ctx.state, m->id, MachineState::kJoining, ctx.now,
                                          "over-evicted for " + incident + ": checked off the job's path"));
  BULWARK_RETURN_IF_ERROR(SetMachineState(ctx.state, m->id, MachineState::kStandby, ctx.now,
                                          "over-evicted for " + incident + ": checkup passed, back to the pool"));
  return true;
}

}  // namespace bulwark::controller::internal
