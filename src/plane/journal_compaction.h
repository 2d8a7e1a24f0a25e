// Journal compaction: the journal keeps every event the policy accepted, and
// a healthy job reports a step every few hundred milliseconds, so it grows
// with training time. Almost all of it is runs of step reports that change
// nothing but a counter the next report overwrites.
//
// Compaction drops the step rows inside such runs and keeps the rows that
// matter to replay: a run's first and last step, the last step before the
// ledger's category changes (recomputation -> productive), rows whose
// observation time goes backwards, and each agent's last report in the run
// (its sequence number is what dedups a resent report after a restart).
// Faults, restarts and checkpoints are never dropped, so the journal grows
// with incidents, not with steps.
//
// It is verified, not trusted: the kept rows are replayed through a fresh
// Controller and its incidents, ledger and state must equal the full
// replay's, else nothing is dropped. The deletion is one SQLite transaction.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "controller/controller.h"
#include "plane/codec.h"
#include "plane/core.h"
#include "plane/store.h"

namespace bulwark::plane {

// The seqs of the step rows `entries` can do without (a pure choice).
std::vector<int64_t> StepRowsToDrop(const std::vector<JournalEntry>& entries);

// Replays `entries` (skipping `drop`) into a controller for `spec`, as the
// plane does at start; NotFound when the journal has no creation row.
Result<Controller> ReplayJournal(const JobSpec& spec, const PolicyConfig& policy,
                                 const std::vector<JournalEntry>& entries, const std::vector<int64_t>& drop);

// What must survive compaction: incidents, the ledger up to `now`, the
// placement, the job's state and step, the machines' states.
nlohmann::json ReplayFingerprint(const Controller& c, Time now);

}  // namespace bulwark::plane
