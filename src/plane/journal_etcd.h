// EtcdJournal: the controller's journal, machines, job and snapshots in etcd
// (`bulwark controller --etcd ENDPOINTS`), so they outlive the controller's
// machine and a standby controller can take over (leader.h).
//
// Keys, under a prefix of the cluster's own (default /bulwark/<cluster>/):
//   format                      "bulwark-controller-etcd-1"
//   machines/<id>               {"dir", "registered_ms", "shard_addr"}
//   job                         {"id", "spec", "created_ms"}
//   journal/<job>/<seq, 16 digits>  {"now_ms", "record"}
//   snapshots/<name>            the snapshot's JSON
//   leader                      the leading controller's id, on its lease
//
// Every write is one etcd transaction whose first compare is the leader
// key's create revision == this controller's term (Term, leader.h): a
// controller deposed while cut off is refused even if it has not noticed,
// and the refusal is FailedPrecondition naming the term. Reads are etcd's
// default linearizable reads.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "plane/etcd_client.h"
#include "plane/journal_etcd_mirror.h"
#include "plane/journal_store.h"
#include "plane/leader.h"

namespace bulwark::plane {

// Writes etcd never answered (no member did before the retries ran out):
// each may or may not have landed. A controller cut off from etcd has one
// when its term ends mid-write. It keeps them past its term and, once etcd
// answers again, sends each again as it was (Settle): etcd refuses it by
// the term compare when another controller has led since (the term's key
// was replaced, and a replaced create revision never comes back), or
// applies it when the term still holds (the same keys and values again).
// A later write of the same term that lands clears them: sent after it,
// an older write would land out of order.
class UnsettledWrites {
 public:
  struct Outcome {
    std::string what;  // "appending to the journal of job ha"
    int64_t term = 0;  // the term it was written in
    bool refused = false;
    std::string detail;  // one line: what etcd did with it, and who leads
  };
  void Keep(const etcdserverpb::TxnRequest& txn, const std::string& what, const Term& term) EXCLUDES(mu_);
  void Clear() EXCLUDES(mu_);
  // Sends every kept write again, in order, each until etcd answers or
  // `stop` is set; what etcd did with each. The kept ones are gone after.
  std::vector<Outcome> Settle(const EtcdClient& etcd, const std::atomic<bool>& stop) EXCLUDES(mu_);

 private:
  struct Kept {
    std::string txn;  // the serialized TxnRequest
    std::string what;
    Term term;
  };
  Mutex mu_;
  std::vector<Kept> kept_ GUARDED_BY(mu_);
};

class EtcdJournal : public JournalStore {
 public:
  // Opens the state under `prefix`, writing as `term`. With `create` an
  // empty prefix gets its format key; without it an empty prefix is
  // NotFound (a restarted controller pointed at the wrong etcd or prefix
  // must not start from nothing).
  // With `mirror` (a standby's copy of the prefix, journal_etcd_mirror.h)
  // reads come from memory once it shows the revisions they must see, and
  // from etcd when it cannot show them within kMirrorWait.
  // With `unsettled`, a write etcd never answered is kept there.
  static Result<std::unique_ptr<EtcdJournal>> Open(std::shared_ptr<const EtcdClient> etcd, std::string prefix,
                                                   Term term, bool create,
                                                   std::shared_ptr<const EtcdMirror> mirror = nullptr,
                                                   std::shared_ptr<UnsettledWrites> unsettled = nullptr);

  Status PutMachine(const MachineRow& m) override;
  Result<std::vector<MachineRow>> Machines() const override;
  Status PutJob(const JobRow& job) override;
  Result<std::optional<JobRow>> Job() const override;
  Status Append(const std::string& job, int64_t now_ms, const std::string& json) override;
  Result<std::vector<JournalEntry>> Journal(const std::string& job) const override;
  // Contiguous seqs go as one delete of their range; at most kRangesPerTxn
  // ranges a transaction (etcd refuses more than --max-txn-ops, 128 by
  // default, operations in one). A compaction of more ranges is several
  // transactions, each fenced: a controller killed between them has dropped
  // only rows from the middle of step runs, whose ends are kept.
  Status DropJournalRows(const std::string& job, const std::vector<int64_t>& seqs) override;
  Status PutSnapshot(const std::string& name, const std::string& json) override;
  Result<std::optional<std::string>> Snapshot(const std::string& name) const override;
  const std::string& path() const override { return path_; }
  // Deletes every key under the prefix, fenced like a write: a refused
  // submit's job journal (job_journals.h).
  Status RemoveAll();

  static constexpr size_t kRangesPerTxn = 100;
  static constexpr std::chrono::milliseconds kMirrorWait{500};

 private:
  EtcdJournal(std::shared_ptr<const EtcdClient> etcd, std::string prefix, Term term,
              std::shared_ptr<const EtcdMirror> mirror, std::shared_ptr<UnsettledWrites> unsettled);
  Status Commit(const etcdserverpb::TxnRequest& txn, const std::string& what) const;
  Result<std::vector<EtcdKv>> Read(const std::string& key, const std::string& end = "") const;
  Result<std::optional<JobRow>> ReadJob(bool from_etcd) const;
  std::string JournalPrefix(const std::string& job) const;
  std::string JournalKey(const std::string& job, int64_t seq) const;
  Result<int64_t> NextSeq(const std::string& job) EXCLUDES(mu_);

  std::shared_ptr<const EtcdClient> etcd_;
  std::shared_ptr<const EtcdMirror> mirror_;  // null: every read from etcd
  std::shared_ptr<UnsettledWrites> unsettled_;  // null: an unanswered write is only an error
  const std::string prefix_;
  const Term term_;
  const std::string path_;
  Mutex mu_;
  // The next seq per job: this term is the only writer, so it is read once.
  std::map<std::string, int64_t> next_seq_ GUARDED_BY(mu_);
};

}  // namespace bulwark::plane
