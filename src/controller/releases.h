// Releases: the versions of a job's code and settings (command, args,
// environment, optionally the binary's hash) and how the policy moves
// between them (ByteRobust §3, lazy in-place hot update).
//
// Release 1 is the job as submitted; `bulwark update` makes the next one.
// A lazy release rides the next restart a fault causes anyway, and is forced
// after PolicyConfig::update_force_after; an urgent one (`--now`) restarts
// the job in place at once. Either way the ranks restart on the same
// machines from their in-memory checkpoints: no requeue, at most the step
// in flight lost. A crash that looks like the code's own fault shortly
// after a release took effect rolls back to the release before it.
//
// The policy tracks only numbers and times; what each release runs lives
// with the plane (it is journaled there). Pure, like the rest of the policy.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "controller/time.h"

namespace bulwark::controller {

struct ReleaseState {
  int applied = 1;  // the release the ranks run (or will run at their start)
  int latest = 1;   // the newest release created
  int pending = 0;  // to apply at the next restart; 0: none
  Time pending_since{};
  // When `applied` replaced an earlier release; empty for the submitted one.
  std::optional<Time> applied_at;
  // ClusterState::progress_epoch when `applied` took effect, and whether it
  // came by an update (newer) rather than a rollback: a crash before the
  // new release's first step is blamed on it.
  int64_t applied_epoch = 0;
  bool applied_by_update = false;
  // Releases rolled back from: never a rollback target again.
  std::set<int> rolled_back;
  // An urgent release the machines are staging (processes of it set up and
  // waiting, so that the restart is a handoff, not a cold start): the job
  // trains on meanwhile, and restarts once every machine has answered or at
  // `stage_deadline`. 0: none.
  int staging = 0;
  Time stage_started{};
  Time stage_deadline{};
  std::string stage_why;             // the operator's, for the incident
  std::set<std::string> staged;      // machines that hold it ready
  std::set<std::string> not_staged;  // machines that said they cannot

  // The release a rollback from `applied` returns to: the newest earlier
  // one not itself rolled back; 0 when there is none.
  int RollbackTarget() const;
  // True when `applied` took effect within `window` before `now`: a crash
  // now may well be the new release's fault.
  bool RecentlyApplied(Time now, Duration window) const;
  // The release the next restart runs.
  int NextRestart() const { return pending != 0 ? pending : applied; }
};

}  // namespace bulwark::controller
