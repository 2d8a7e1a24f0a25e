// JournalStore: where the controller keeps its durable state (store.h).
//
// Two backends sit behind it: SQLite on the controller's own disk (Store,
// store.h), the embedded default, and etcd (EtcdJournal, journal_etcd.h),
// which outlives the controller's machine and lets a standby controller take
// over. The plane (plane.h) sees only this interface, so replay, compaction
// and the sticky journal error are the same code for both.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark::plane {

struct MachineRow {
  std::string id;
  std::string dir;
  int64_t registered_ms = 0;
  // Its agent's shard server. Kept because agents do not register again
  // when only the controller restarted, and backups need the address.
  std::string shard_addr;
};

// The job as submitted: the policy's JobSpec plus how to launch a rank.
struct JobRow {
  std::string id;
  std::string spec_json;  // codec.h: JobLaunch
  int64_t created_ms = 0;
};

struct JournalEntry {
  int64_t seq = 0;
  int64_t now_ms = 0;
  std::string json;  // codec.h: a create, event or reconcile record
};

class JournalStore {
 public:
  virtual ~JournalStore() = default;

  virtual Status PutMachine(const MachineRow& m) = 0;
  virtual Result<std::vector<MachineRow>> Machines() const = 0;

  // One job per cluster for now: PutJob fails with FailedPrecondition when
  // one is already there.
  virtual Status PutJob(const JobRow& job) = 0;
  virtual Result<std::optional<JobRow>> Job() const = 0;

  // Rows come back in the order they were appended, seq ascending.
  virtual Status Append(const std::string& job, int64_t now_ms, const std::string& json) = 0;
  virtual Result<std::vector<JournalEntry>> Journal(const std::string& job) const = 0;
  // Deletes the journal rows `seqs` of `job`: all or none
  // (journal_compaction.h decides which).
  virtual Status DropJournalRows(const std::string& job, const std::vector<int64_t>& seqs) = 0;

  // Named JSON documents (placement, incidents, ledger, completion):
  // replaced wholesale, read by the CLI without a replay.
  virtual Status PutSnapshot(const std::string& name, const std::string& json) = 0;
  virtual Result<std::optional<std::string>> Snapshot(const std::string& name) const = 0;

  // Where the state lives, for messages: a file path or etcd://endpoints/prefix.
  virtual const std::string& path() const = 0;
};

}  // namespace bulwark::plane
