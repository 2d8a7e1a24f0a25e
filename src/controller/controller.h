// Controller: the policy with its state, for one job. Events in, actions
// out, time passed in; no I/O. The gRPC server, the SQLite store and the
// scale simulator all drive this same class.
//
//   auto c = Controller::Create(spec, config, {"m01", "m02", "s01"}, now);
//   auto start = c->Reconcile(now);               // Activate..., RestartAll
//   auto acts = c->Handle(RankExited{...}, now);  // decide and act
//
// Not thread-safe: the caller serializes events (one controller per job, as
// in ByteRobust, each on its own goroutine or thread).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "controller/action.h"
#include "controller/cluster_state.h"
#include "controller/event.h"
#include "controller/ledger.h"
#include "controller/policy_config.h"
#include "controller/standby_pool.h"
#include "controller/time.h"

namespace bulwark::controller {

class Controller {
 public:
  // A controller for `spec`, with `standbys` registered as self-checked
  // standbys. Nothing is started until the first Reconcile. Starts the
  // ledger at `now`. InvalidArgument for a bad spec, config or machine list.
  // `domains`: the failure domain (rack, switch) of each machine that has
  // one (MachineStatus::domain); machines that join later say theirs.
  static Result<Controller> Create(JobSpec spec, PolicyConfig config,
                                   const std::vector<MachineId>& standbys, Time now,
                                   const std::map<MachineId, std::string>& domains = {});

  // Handles one event observed by an agent, monitor or operator, then
  // reconciles. Returns the actions to carry out, in order. InvalidArgument
  // when `now` is earlier than a previous call's; NotFound or
  // FailedPrecondition (with nothing changed) for an event that names an
  // unknown machine or asks the impossible. Observation times later than
  // `now` (agent clock skew) are taken as `now`.
  Result<std::vector<Action>> Handle(const Event& event, Time now);
  // Events observed together (the simulator's 12,500 diagnostics answers of
  // one instant) as one decision: DecideAll in policy.h. An event refused
  // is listed in `refused` with why; the others apply.
  Result<std::vector<Action>> HandleAll(const std::vector<Event>& events, Time now,
                                        std::vector<std::pair<size_t, Status>>* refused);
  // The same, with `events` clamped to `now` in place rather than copied
  // (a round's 12,500 answers, each with its results, were a twentieth of
  // a simulated year's time).
  Result<std::vector<Action>> HandleAllInPlace(std::vector<Event>& events, Time now,
                                               std::vector<std::pair<size_t, Status>>* refused);

  // Compares desired with actual and acts on the difference; returns no
  // actions when the world already matches.
  Result<std::vector<Action>> Reconcile(Time now);

  const ClusterState& state() const { return state_; }
  const PolicyConfig& config() const { return config_; }
  const std::vector<Incident>& incidents() const { return state_.incidents.all(); }
  StandbyReport standby() const;
  TimeBreakdown Cumulative(Time now) const { return state_.ledger.Cumulative(now); }
  TimeBreakdown Window(Time now) const { return state_.ledger.Window(now); }
  std::vector<LedgerSegment> Timeline(Time now) const { return state_.ledger.Timeline(now); }

 private:
  explicit Controller(PolicyConfig config) : config_(std::move(config)) {}
  Status Advance(Time now);

  PolicyConfig config_;
  ClusterState state_;
  Time last_now_{};
};

}  // namespace bulwark::controller
