// Helpers the policy's rule files share (policy.cc, ladder_rules.cc); not
// part of the policy's public surface (policy.h).
#pragma once

#include <string>
#include <vector>

#include "controller/incident.h"
#include "controller/policy.h"

namespace bulwark::controller::internal {

// Over-evicts `machines` (those still active) for `inc`, recording `why`.
Status OverEvict(RuleContext& ctx, Incident& inc, const std::vector<MachineId>& machines, const std::string& why);

// The stop-time ladder's rules (ladder_rules.cc). EnterLadder: a fault with
// no culprit starts the ladder, or climbs it while it watches a restart.
Status EnterLadder(RuleContext& ctx, Incident& inc, const std::string& trigger, int64_t step, bool reattempted);
Status OnDiagnosticsReported(RuleContext& ctx, const Event& e);
Status OnLadderDeadline(RuleContext& ctx, const Event& e);

}  // namespace bulwark::controller::internal
