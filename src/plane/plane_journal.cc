// The plane's journal: rebuilding the controller from it at start, its
// compaction, and the snapshots the CLI reads without a replay (store.h).
#include "common/files.h"
#include "plane/codec.h"
#include "plane/journal_compaction.h"
#include "plane/plane.h"

namespace bulwark::plane {

using nlohmann::json;

Status Plane::RebuildLocked(Time now) {
  Result<std::vector<MachineRow>> machines = store_->Machines();
  if (!machines.ok()) return machines.status();
  for (const MachineRow& m : *machines) {
    Agent& a = AgentForLocked(m.id);
    a.dir = m.dir;
    a.stored = true;
    a.shard_addr = m.shard_addr;
    RoutesChangedLocked();
    // A restarted controller has heard from nobody yet: give every agent a
    // full timeout to reconnect before calling it lost, counted again from
    // when it serves (Serving) and while others re-attach (ReattachingLocked).
    liveness_.SetHeard(m.id, now);
    reattach_at_ = now;
  }
  Result<std::optional<JobRow>> job = store_->Job();
  if (!job.ok()) return job.status();
  if (!job->has_value()) return Status::OK();
  const JobRow& row = **job;
  json spec;
  try {
    spec = json::parse(row.spec_json);
  } catch (const std::exception& e) {
    return Status::Corrupt("job " + row.id + " in " + store_->path() + ": unreadable spec: " + e.what());
  }
  Result<JobLaunch> launch = DecodeLaunch(spec);
  if (!launch.ok()) return launch.status().Annotate("job " + row.id);
  launch_ = std::move(*launch);
  BULWARK_RETURN_IF_ERROR(ApplyJobPolicyLocked(*launch_));

  Result<std::vector<JournalEntry>> journal = store_->Journal(row.id);
  if (!journal.ok()) return journal.status();
  size_t replayed = 0;
  for (const JournalEntry& entry : *journal) {
    const Time at = NowLocked(TimeFromMs(entry.now_ms));
    Result<JournalRow> rec = DecodeJournalRow(entry.json);
    if (!rec.ok()) {
      return rec.status().Annotate("journal entry " + std::to_string(entry.seq) + " of job " + row.id);
    }
    const std::string& type = rec->type;
    Result<std::vector<Action>> actions = std::vector<Action>{};
    if (type == "create") {
      Result<Controller> c = Controller::Create(launch_->spec, options_.policy, rec->standbys, at, rec->domains);
      if (!c.ok()) return c.status().Annotate("replaying job " + row.id);
      controller_.emplace(std::move(*c));
    } else if (!controller_) {
      return Status::Corrupt("journal of job " + row.id + " does not begin with its creation");
    } else if (type == "reconcile") {
      actions = controller_->Reconcile(at);
    } else if (type == "events") {
      std::vector<std::pair<size_t, Status>> refused;  // refused again as they were live
      actions = controller_->HandleAll(rec->events, at, &refused);
    } else if (type == "event") {
      actions = controller_->Handle(*rec->event, at);
    } else if (type == "done") {
      done_step_ = rec->step;
      // For people only; older journals do not say.
      const json row = json::parse(entry.json, nullptr, false);
      done_why_ = row.is_object() ? row.value("why", "") : "";
    } else if (type == "release" && rec->release) {
      releases_[rec->release->number] = *rec->release;
    }
    if (rec->origin) {
      Agent& a = AgentForLocked(rec->origin->machine);
      a.incarnation = rec->origin->incarnation;
      a.acked_seq = rec->origin->seq;
    }
    // Replay must take the same path the live controller took; a refusal
    // here means the journal and the policy disagree.
    if (!actions.ok()) return actions.status().Annotate("replaying journal entry " + std::to_string(entry.seq));
    BULWARK_RETURN_IF_ERROR(AfterDecisionLocked(*actions, /*deliver=*/false, at));
    ++replayed;
  }
  LogLocked("rebuilt job " + row.id + " from " + std::to_string(replayed) + " journal entries");
  if (controller_) replayed_hold_ = ReplayedHold{now, controller_->state().placement.generation};
  // The ladder waits for diagnostics this controller's predecessor asked
  // for; the one-shots may have died with it before every agent got one.
  // Sent again under the same id, they run only where they never ran.
  if (controller_ && diagnose_decided_ && !done_step_) {
    const LadderStatus& l = controller_->state().ladder;
    const bool waiting = l.state == LadderState::kDiagnosing || l.state == LadderState::kReplaying;
    if (waiting && diagnose_decided_->incident == l.incident) {
      LogLocked("re-sending " + diagnose_decided_->id + " to the job's " +
          std::to_string(diagnose_decided_->placement.slots.size()) + " machine(s): the ladder was waiting for it");
      SendDiagnoseLocked(*diagnose_decided_);
    }
  }
  BULWARK_RETURN_IF_ERROR(CompactJournalLocked(now));
  // The detectors learned nothing from the journal (signals are not kept):
  // a live job's ranks get the first step's allowance again. Ranks that had
  // reported a step are judged from now on, silent or not: one hung before
  // the restart never speaks to this controller (issue 37).
  monitors_->Stop();
  if (controller_ && !done_step_) {
    const JobState js = controller_->state().job;
    if (js == JobState::kRestarting || js == JobState::kRunning) {
      Topology layout = controller_->state().spec.topology();
      layout.world = controller_->state().placement.world_size();
      const int64_t reported = controller_->state().last_step;
      if (reported > 0) {
        monitors_->Resumed(now, layout, reported);
      } else {
        monitors_->Started(now, layout);
      }
    }
  }
  return Status::OK();
}

Status Plane::CompactJournalLocked(Time now) {
  appended_since_compaction_ = 0;
  if (!launch_) return Status::OK();
  Result<std::vector<JournalEntry>> journal = store_->Journal(launch_->spec.id);
  if (!journal.ok()) return journal.status();
  const std::vector<int64_t> drop = StepRowsToDrop(*journal);
  if (drop.empty()) return Status::OK();
  Result<Controller> full = ReplayJournal(launch_->spec, options_.policy, *journal, {});
  Result<Controller> compacted = ReplayJournal(launch_->spec, options_.policy, *journal, drop);
  if (!full.ok() || !compacted.ok()) {
    LogLocked("journal compaction skipped: replay failed: " + (full.ok() ? compacted.status() : full.status()).ToString());
    return Status::OK();
  }
  if (ReplayFingerprint(*full, now) != ReplayFingerprint(*compacted, now)) {
    LogLocked("journal compaction skipped: replaying without " + std::to_string(drop.size()) +
        " step rows would not rebuild the same state (kept everything)");
    return Status::OK();
  }
  BULWARK_RETURN_IF_ERROR(store_->DropJournalRows(launch_->spec.id, drop));
  LogLocked("compacted the journal: dropped " + std::to_string(drop.size()) + " of " + std::to_string(journal->size()) +
      " rows (step reports replay does not need)");
  return Status::OK();
}

Status Plane::SaveSnapshotsLocked(Time now) {
  BULWARK_RETURN_IF_ERROR(store_->PutSnapshot("incidents", IncidentsLocked().dump()));
  BULWARK_RETURN_IF_ERROR(store_->PutSnapshot("ledger", LedgerLocked(now).dump()));
  json p{{"generation", controller_->state().placement.generation},
         {"slots", controller_->state().placement.slots}};
  return store_->PutSnapshot("placement", p.dump());
}

}  // namespace bulwark::plane
