// Store: the controller's durable state in one SQLite file.
//
// The source of truth is the journal: the job's creation and every event the
// policy accepted, each with the `now` it was handled at. The policy is pure
// and deterministic, so replaying the journal through a fresh Controller
// rebuilds exactly the state, incidents and ledger the killed controller had
// (see plane.cc). Beside it the store keeps what operators and agents need
// without a replay: registered machines, the submitted job, and snapshots of
// the placement, incidents and ledger written after every change.
//
// Every write is one transaction in WAL mode with synchronous=FULL, so a
// SIGKILL at any point leaves the last committed change and nothing torn.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "plane/core.h"
#include "plane/journal_store.h"

struct sqlite3;

namespace bulwark::plane {

// The embedded default backend of JournalStore (journal_store.h).
class Store : public JournalStore {
 public:
  // Opens the database at `path`. With `create` a missing file is made and
  // the schema installed; without it a missing file is NotFound (a controller
  // restarted with the wrong --dir must not start from nothing). A file that
  // is not a bulwark database is Corrupt, naming the path.
  static Result<std::unique_ptr<Store>> Open(const std::string& path, bool create);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  Status PutMachine(const MachineRow& m) override;
  Result<std::vector<MachineRow>> Machines() const override;

  // One job per cluster for now: PutJob fails with FailedPrecondition when
  // one is already there.
  Status PutJob(const JobRow& job) override;
  Result<std::optional<JobRow>> Job() const override;

  Status Append(const std::string& job, int64_t now_ms, const std::string& json) override;
  Result<std::vector<JournalEntry>> Journal(const std::string& job) const override;
  // Deletes the journal rows `seqs` of `job` in one transaction: all or none
  // (journal_compaction.h decides which).
  Status DropJournalRows(const std::string& job, const std::vector<int64_t>& seqs) override;

  // Named JSON documents (placement, incidents, ledger, completion):
  // replaced wholesale, read by the CLI and by people with sqlite3.
  Status PutSnapshot(const std::string& name, const std::string& json) override;
  Result<std::optional<std::string>> Snapshot(const std::string& name) const override;

  const std::string& path() const override { return path_; }

 private:
  Store(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  Status Exec(const std::string& sql) const;
  Status Error(const std::string& what) const;

  sqlite3* db_;
  std::string path_;
};

// Store::Open as the JournalStore the plane holds (plane.h, PlaneOptions).
Result<std::unique_ptr<JournalStore>> OpenSqliteJournal(const std::string& path, bool create);

}  // namespace bulwark::plane
