// The controller's policy: one rule per event kind, then Reconcile.
//
// A rule records what the event says (a flap, a crash, a step), names the
// culprit if there is one, and decides how to handle it: evict a machine,
// ask for a reattempt, or stop the job. It never builds placements or
// restarts by itself; Reconcile turns "slot without a machine" or "restart
// pending" into Activate and RestartAll, in one place.
//
// Pure: no I/O, no clock, no threads. Time comes in as `now` and as the
// events' observation times, so the scale simulator and the tests drive the
// same code on a virtual clock.
//
// Adding a rule (hangs, slowdowns, NaN losses): add the event (event.h),
// write a Status OnX(RuleContext&, const Event&) in policy.cc and put it in
// RuleTable() at the event's position; a static_assert checks the order.
#pragma once

#include <array>
#include <vector>

#include "common/status.h"
#include "controller/action.h"
#include "controller/cluster_state.h"
#include "controller/event.h"
#include "controller/policy_config.h"
#include "controller/time.h"

namespace bulwark::controller {

// What a rule works with: the state to change, the thresholds, the time,
// and where decided actions go.
struct RuleContext {
  ClusterState& state;
  const PolicyConfig& config;
  Time now;
  std::vector<Action>& actions;
};

using Rule = Status (*)(RuleContext& ctx, const Event& event);

struct RuleEntry {
  EventKind kind;
  Rule rule;
};

// Indexed by EventKind.
const std::array<RuleEntry, kNumEventKinds>& RuleTable();

// Records a decided action in the incident log and the ledger, applies it to
// the state and appends it to ctx.actions. Every action goes through here.
Status Emit(RuleContext& ctx, Action action);

// Runs the event's rule, then Reconcile, emitting every action. On an error
// from the rule (unknown machine, illegal request) nothing was changed.
Status Decide(RuleContext& ctx, const Event& event);

// Several events of one instant as one decision: each event's rule in
// order, then one Reconcile, as the plane's tick after them would. A rule
// that refuses its event changes nothing and is listed in `refused` (the
// event's index and why); the other events still apply.
Status DecideAll(RuleContext& ctx, const std::vector<Event>& events,
                 std::vector<std::pair<size_t, Status>>* refused);

// Whether the periodic bitwise check (LadderConfig::align_every) is due at
// `now`: on, the job running with no incident open and no ladder climbing,
// and align_every since the first step or the latest check; or whether the
// check in flight has reached its deadline. The plane asks from its tick
// and sends AlignmentCheckDue; the rule asks again (policy_align.cc).
bool AlignmentCheckIsDue(const ClusterState& s, const LadderConfig& config, Time now);

}  // namespace bulwark::controller
