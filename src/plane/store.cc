#include "plane/store.h"

#include <sqlite3.h>

#include "common/files.h"

namespace bulwark::plane {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT OR IGNORE INTO meta VALUES ('format', 'bulwark-controller-1');
CREATE TABLE IF NOT EXISTS machines (
  id TEXT PRIMARY KEY, dir TEXT NOT NULL, registered_ms INTEGER NOT NULL,
  shard_addr TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS jobs (
  id TEXT PRIMARY KEY, spec TEXT NOT NULL, created_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS journal (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT NOT NULL, now_ms INTEGER NOT NULL,
  record TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS snapshots (name TEXT PRIMARY KEY, json TEXT NOT NULL);
)sql";

// A prepared statement that finalizes itself.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) { rc_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr); }
  ~Stmt() { sqlite3_finalize(s_); }
  bool ok() const { return rc_ == SQLITE_OK; }
  void Bind(int i, const std::string& v) { sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT); }
  void Bind(int i, int64_t v) { sqlite3_bind_int64(s_, i, v); }
  int Step() { return sqlite3_step(s_); }
  std::string Text(int i) const {
    const unsigned char* t = sqlite3_column_text(s_, i);
    return t ? reinterpret_cast<const char*>(t) : "";
  }
  int64_t Int(int i) const { return sqlite3_column_int64(s_, i); }

 private:
  sqlite3_stmt* s_ = nullptr;
  int rc_;
};

}  // namespace

Result<std::unique_ptr<Store>> Store::Open(const std::string& path, bool create) {
  if (!create && !PathExists(path)) {
    return Status::NotFound("controller database " + path +
                            " does not exist; start the cluster with 'bulwark up' or pass the "
                            "--dir it was started with");
  }
  sqlite3* db = nullptr;
  const int flags = SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0) | SQLITE_OPEN_FULLMUTEX;
  if (sqlite3_open_v2(path.c_str(), &db, flags, nullptr) != SQLITE_OK) {
    std::string why = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return Status::IOError("controller database " + path + ": cannot open: " + why);
  }
  std::unique_ptr<Store> store(new Store(db, path));
  sqlite3_busy_timeout(db, 5000);
  // WAL + FULL: a commit survives SIGKILL and power loss; readers (the CLI
  // with sqlite3) never block the controller.
  Status st = store->Exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;");
  if (st.ok()) st = store->Exec(kSchema);
  if (!st.ok()) {
    return Status::Corrupt("controller database " + path +
                           " is not a usable bulwark database (" + st.message() +
                           "); move it aside and run 'bulwark up' again");
  }
  // Databases written before in-memory checkpoints lack the shard server
  // column; adding it is the whole migration (old rows read as no address).
  if (!Stmt(db, "SELECT shard_addr FROM machines LIMIT 0").ok()) {
    if (Status add = store->Exec("ALTER TABLE machines ADD COLUMN shard_addr TEXT NOT NULL DEFAULT ''");
        !add.ok()) {
      return Status::Corrupt("controller database " + path + ": cannot add the shard_addr column (" +
                             add.message() + "); move it aside and run 'bulwark up' again");
    }
  }
  Stmt q(db, "SELECT value FROM meta WHERE key = 'format'");
  if (!q.ok() || q.Step() != SQLITE_ROW || q.Text(0) != "bulwark-controller-1") {
    return Status::Corrupt("controller database " + path + " has an unknown format; it was not "
                           "written by this version of bulwark");
  }
  return store;
}

Result<std::unique_ptr<JournalStore>> OpenSqliteJournal(const std::string& path, bool create) {
  Result<std::unique_ptr<Store>> s = Store::Open(path, create);
  if (!s.ok()) return s.status();
  return std::unique_ptr<JournalStore>(std::move(*s));
}

Store::~Store() { sqlite3_close(db_); }

Status Store::Exec(const std::string& sql) const {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string why = err ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    return Status::IOError(why);
  }
  return Status::OK();
}

Status Store::Error(const std::string& what) const {
  return Status::IOError("controller database " + path_ + ": " + what + ": " + sqlite3_errmsg(db_));
}

Status Store::PutMachine(const MachineRow& m) {
  Stmt s(db_, "INSERT INTO machines (id, dir, registered_ms, shard_addr) VALUES (?1, ?2, ?3, ?4) "
              "ON CONFLICT(id) DO UPDATE SET dir = ?2, registered_ms = ?3, shard_addr = ?4");
  s.Bind(1, m.id);
  s.Bind(2, m.dir);
  s.Bind(3, m.registered_ms);
  s.Bind(4, m.shard_addr);
  if (!s.ok() || s.Step() != SQLITE_DONE) return Error("recording machine " + m.id);
  return Status::OK();
}

Result<std::vector<MachineRow>> Store::Machines() const {
  Stmt s(db_, "SELECT id, dir, registered_ms, shard_addr FROM machines ORDER BY id");
  if (!s.ok()) return Error("listing machines");
  std::vector<MachineRow> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) out.push_back({s.Text(0), s.Text(1), s.Int(2), s.Text(3)});
  if (rc != SQLITE_DONE) return Error("listing machines");
  return out;
}

Status Store::PutJob(const JobRow& job) {
  Result<std::optional<JobRow>> existing = Job();
  if (!existing.ok()) return existing.status();
  if (existing->has_value()) {
    return Status::FailedPrecondition("job " + (*existing)->id +
                                      " is already submitted to this cluster; one job per cluster: "
                                      "run 'bulwark down' and 'bulwark up' for a new one");
  }
  Stmt s(db_, "INSERT INTO jobs VALUES (?1, ?2, ?3)");
  s.Bind(1, job.id);
  s.Bind(2, job.spec_json);
  s.Bind(3, job.created_ms);
  if (!s.ok() || s.Step() != SQLITE_DONE) return Error("recording job " + job.id);
  return Status::OK();
}

Result<std::optional<JobRow>> Store::Job() const {
  Stmt s(db_, "SELECT id, spec, created_ms FROM jobs ORDER BY created_ms LIMIT 1");
  if (!s.ok()) return Error("reading the job");
  const int rc = s.Step();
  if (rc == SQLITE_DONE) return std::optional<JobRow>();
  if (rc != SQLITE_ROW) return Error("reading the job");
  return std::optional<JobRow>(JobRow{s.Text(0), s.Text(1), s.Int(2)});
}

Status Store::Append(const std::string& job, int64_t now_ms, const std::string& json) {
  Stmt s(db_, "INSERT INTO journal (job, now_ms, record) VALUES (?1, ?2, ?3)");
  s.Bind(1, job);
  s.Bind(2, now_ms);
  s.Bind(3, json);
  if (!s.ok() || s.Step() != SQLITE_DONE) return Error("appending to the journal of job " + job);
  return Status::OK();
}

Status Store::DropJournalRows(const std::string& job, const std::vector<int64_t>& seqs) {
  BULWARK_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  for (int64_t seq : seqs) {
    Stmt s(db_, "DELETE FROM journal WHERE job = ?1 AND seq = ?2");
    s.Bind(1, job);
    s.Bind(2, seq);
    if (!s.ok() || s.Step() != SQLITE_DONE) {
      Status err = Error("compacting the journal of job " + job);
      (void)Exec("ROLLBACK");
      return err;
    }
  }
  return Exec("COMMIT");
}

Result<std::vector<JournalEntry>> Store::Journal(const std::string& job) const {
  Stmt s(db_, "SELECT seq, now_ms, record FROM journal WHERE job = ?1 ORDER BY seq");
  if (!s.ok()) return Error("reading the journal of job " + job);
  s.Bind(1, job);
  std::vector<JournalEntry> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) out.push_back({s.Int(0), s.Int(1), s.Text(2)});
  if (rc != SQLITE_DONE) return Error("reading the journal of job " + job);
  return out;
}

Status Store::PutSnapshot(const std::string& name, const std::string& json) {
  Stmt s(db_, "INSERT INTO snapshots VALUES (?1, ?2) ON CONFLICT(name) DO UPDATE SET json = ?2");
  s.Bind(1, name);
  s.Bind(2, json);
  if (!s.ok() || s.Step() != SQLITE_DONE) return Error("writing snapshot " + name);
  return Status::OK();
}

Result<std::optional<std::string>> Store::Snapshot(const std::string& name) const {
  Stmt s(db_, "SELECT json FROM snapshots WHERE name = ?1");
  if (!s.ok()) return Error("reading snapshot " + name);
  s.Bind(1, name);
  const int rc = s.Step();
  if (rc == SQLITE_DONE) return std::optional<std::string>();
  if (rc != SQLITE_ROW) return Error("reading snapshot " + name);
  return std::optional<std::string>(s.Text(0));
}

}  // namespace bulwark::plane
