// Helpers the policy's rule files share (policy.cc, policy_implicit.cc, ladder_rules.cc); not
// part of the policy's public surface (policy.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "controller/incident.h"
#include "controller/policy.h"

namespace bulwark::controller::internal {

// Ranks exist only while the job is (re)starting or running; crashes and
// steps reported in any other state are leftovers of ranks already stopped.
bool RanksAreLive(JobState s);
bool LadderEnabled(const PolicyConfig& c);
// True while the stop-time ladder holds the job stopped for diagnostics.
bool LadderHoldsJob(const ClusterState& s);

// Opens an incident, or joins the open one: faults that arrive before the job
// recovers belong to the same episode. A new explicit or implicit incident
// starts the ledger's detection and localization; a manual one its manual phase.
Result<Incident*> OpenIncident(RuleContext& ctx, IncidentClass cls, const std::string& cause,
                               std::optional<Time> fault, bool localized = true);

// High-confidence machine fault: evict at once (policy.cc says why).
Status EvictForFault(RuleContext& ctx, const MachineId& machine, const std::string& cause,
                     std::optional<Time> fault);
Status StopJob(RuleContext& ctx, const std::string& cause, std::optional<Time> fault, const std::string& why);
// Sorted time lists: insert keeping the order, drop what is before `cutoff`.
void InsertSorted(std::vector<Time>& times, Time t);
void PruneBefore(std::vector<Time>& times, Time cutoff);

// Crashes that name no machine (policy_crashes.cc): attribution carried
// out, and a peer-lost exit that names the machine its peers cannot reach
// (true when it blamed one, and the exit needs nothing more).
Status OnSoftwareCrash(RuleContext& ctx, const MachineId& machine, const std::string& signature, int exit_code,
                       Time observed, const std::string& cause);
Result<bool> EvictUnreachablePeer(RuleContext& ctx, const RankExited& x, const std::string& cause);

// Failure domains (policy_domains.cc). DomainMachineLost: true when the
// heartbeat loss was a domain's (a burst, or a machine of a domain already
// down) and is handled; false: a machine fault like any other. DomainEcho:
// true when a rank's exit is a peer lost to a domain that went down (noted,
// recorded as no crash). DomainReturn: true when a machine lost with its
// domain registered again and went back to the pool.
Result<bool> DomainMachineLost(RuleContext& ctx, const MachineHeartbeatLost& x, const std::string& cause);
bool DomainEcho(RuleContext& ctx, const RankExited& x);
Result<bool> DomainReturn(RuleContext& ctx, MachineStatus& m, const MachineJoined& x);

// The implicit-fault rules (policy_implicit.cc).
Status OnHangSuspected(RuleContext& ctx, const Event& e);
Status OnStacksAnalyzed(RuleContext& ctx, const Event& e);
Status OnFailSlowSuspected(RuleContext& ctx, const Event& e);
Status OnTrainingAnomaly(RuleContext& ctx, const Event& e);

// Over-evicts `machines` (those still active) for `inc`, recording `why`.
// `on_suspicion`: no test has failed them yet, so each gets a checkup off
// the job's path (PolicyConfig::checkup_evicted).
Status OverEvict(RuleContext& ctx, Incident& inc, const std::vector<MachineId>& machines, const std::string& why,
                 bool on_suspicion = false);

// Checkups (policy_checkup.cc). CheckUp: asks evicted `machine` to run the
// checkup tests for `incident`. CheckupAnswered: true when `x` answers a
// checkup in flight (and is handled: back to the pool, or kept out).
Status CheckUp(RuleContext& ctx, MachineStatus& machine, int64_t incident);
Result<bool> CheckupAnswered(RuleContext& ctx, const DiagnosticsReported& x);

// The stop-time ladder's rules (ladder_rules.cc). EnterLadder: a fault with
// no culprit starts the ladder, or climbs it while it watches a restart.
Status EnterLadder(RuleContext& ctx, Incident& inc, const std::string& trigger, int64_t step, bool reattempted);
Status OnDiagnosticsReported(RuleContext& ctx, const Event& e);
Status OnLadderDeadline(RuleContext& ctx, const Event& e);
Status StartLinkCheck(RuleContext& ctx, const FailSlowSuspected& x);
bool LinkCheckIsDue(const ClusterState& s, const PolicyConfig& config);

// The periodic bitwise check beside the ranks (policy_align.cc).
// AlignCheckAnswered: true when `x` answers such a check (and is handled).
Status OnAlignmentCheckDue(RuleContext& ctx, const Event& e);
Result<bool> AlignCheckAnswered(RuleContext& ctx, const DiagnosticsReported& x);

// Releases and requeue mode (policy_releases.cc).
Status OnReleaseCreated(RuleContext& ctx, const Event& e);
Status OnRollbackRequested(RuleContext& ctx, const Event& e);
Status OnReleaseDue(RuleContext& ctx, const Event& e);
Status OnRequeueDue(RuleContext& ctx, const Event& e);
Status OnReleaseStaged(RuleContext& ctx, const Event& e);
Status OnStageDue(RuleContext& ctx, const Event& e);
// A crash that would stop the job (`why`), shortly after a release took
// effect: rolls back to the release before it instead, and returns true.
// False (nothing done) when no release is recent or none is left to return to.
Result<bool> RollBackAfterCrash(RuleContext& ctx, const std::string& cause, Time observed, const std::string& why);
// The ladder's rollback rung: restarts on the previous release when there is
// one (true), records why not otherwise (false).
Result<bool> RollBackForLadder(RuleContext& ctx, Incident& inc);

}  // namespace bulwark::controller::internal
