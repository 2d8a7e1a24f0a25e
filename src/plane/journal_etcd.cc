#include "plane/journal_etcd.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cinttypes>
#include <functional>
#include <cstdio>
#include <thread>

#include "etcd/rpc.pb.h"

namespace bulwark::plane {

namespace pb = etcdserverpb;
using nlohmann::json;

namespace {

constexpr const char* kFormat = "bulwark-controller-etcd-1";

// A transaction that applies only while `term` leads.
pb::TxnRequest Fenced(const Term& term) {
  pb::TxnRequest txn;
  pb::Compare* c = txn.add_compare();
  c->set_key(term.key);
  c->set_target(pb::Compare::CREATE);
  c->set_result(pb::Compare::EQUAL);
  c->set_create_revision(term.revision);
  return txn;
}

void AddPut(pb::TxnRequest* txn, const std::string& key, const std::string& value) {
  pb::PutRequest* put = txn->add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(value);
}

Status Deposed(const Term& term, const std::string& what) {
  return Status::FailedPrecondition(what + " refused by etcd: this controller's term " + std::to_string(term.revision) +
                                    " of " + term.key +
                                    " is over (its lease expired and another controller may lead); it writes "
                                    "nothing more and must campaign again");
}

}  // namespace

// Runs a fenced transaction; a failed compare is Deposed. Its revision is
// what later reads through the mirror wait for.
Status EtcdJournal::Commit(const pb::TxnRequest& txn, const std::string& what) const {
  pb::TxnResponse resp;
  Status st = etcd_->Txn(txn, &resp);
  if (st.code() == Status::Code::kUnavailable && unsettled_) unsettled_->Keep(txn, what, term_);
  BULWARK_RETURN_IF_ERROR(st.Annotate(what));
  if (!resp.succeeded()) return Deposed(term_, what);
  if (unsettled_) unsettled_->Clear();
  if (mirror_) mirror_->NoteWritten(resp.header().revision());
  return Status::OK();
}

void UnsettledWrites::Keep(const pb::TxnRequest& txn, const std::string& what, const Term& term) {
  MutexLock lock(&mu_);
  kept_.push_back({txn.SerializeAsString(), what, term});
}

void UnsettledWrites::Clear() {
  MutexLock lock(&mu_);
  kept_.clear();
}

std::vector<UnsettledWrites::Outcome> UnsettledWrites::Settle(const EtcdClient& etcd, const std::atomic<bool>& stop) {
  std::vector<Kept> kept;
  {
    MutexLock lock(&mu_);
    kept.swap(kept_);
  }
  std::vector<Outcome> out;
  for (const Kept& k : kept) {
    pb::TxnRequest txn;
    txn.ParseFromString(k.txn);
    // Refused, it says who holds the term's key now.
    txn.add_failure()->mutable_request_range()->set_key(k.term.key);
    pb::TxnResponse resp;
    Status st = etcd.Txn(txn, &resp);
    while (!stop && st.code() == Status::Code::kUnavailable) {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      st = etcd.Txn(txn, &resp);
    }
    if (!st.ok()) break;  // stopped, or an error of etcd's own: nothing is known
    Outcome o{k.what, k.term.revision, !resp.succeeded(), ""};
    if (!o.refused) {
      o.detail = k.what + " (term " + std::to_string(k.term.revision) + "), sent again once etcd answered: applied, "
                 "the term still held";
    } else {
      std::string holder = "no controller";
      if (resp.responses_size() > 0 && resp.responses(0).response_range().kvs_size() > 0) {
        const auto& kv = resp.responses(0).response_range().kvs(0);
        holder = kv.value() + " (term " + std::to_string(kv.create_revision()) + ")";
      }
      o.detail = k.what + " (term " + std::to_string(k.term.revision) + "), sent again once etcd answered: refused by "
                 "etcd's compare on " + k.term.key + ", which " + holder + " holds now";
    }
    out.push_back(std::move(o));
  }
  return out;
}

Result<std::vector<EtcdKv>> EtcdJournal::Read(const std::string& key, const std::string& end) const {
  // The mirror holds the predecessor's writes once it shows this term's
  // revision, and this term's own once it shows the last one's.
  if (mirror_ && mirror_->WaitFor(std::max(term_.revision, mirror_->written()), kMirrorWait)) {
    return mirror_->Range(key, end);
  }
  return etcd_->Range(key, end);
}

namespace {

template <typename T>
Result<T> Parse(const EtcdKv& kv, const std::string& path, const std::function<T(const json&)>& read) {
  try {
    return read(json::parse(kv.value));
  } catch (const std::exception& e) {
    return Status::Corrupt("key " + kv.key + " in " + path + " is unreadable: " + e.what());
  }
}

}  // namespace

EtcdJournal::EtcdJournal(std::shared_ptr<const EtcdClient> etcd, std::string prefix, Term term,
                         std::shared_ptr<const EtcdMirror> mirror, std::shared_ptr<UnsettledWrites> unsettled)
    : etcd_(std::move(etcd)),
      mirror_(std::move(mirror)),
      unsettled_(std::move(unsettled)),
      prefix_(std::move(prefix)),
      term_(std::move(term)),
      path_("etcd://" + etcd_->endpoints() + prefix_) {}

Result<std::unique_ptr<EtcdJournal>> EtcdJournal::Open(std::shared_ptr<const EtcdClient> etcd, std::string prefix,
                                                       Term term, bool create,
                                                       std::shared_ptr<const EtcdMirror> mirror,
                                                       std::shared_ptr<UnsettledWrites> unsettled) {
  std::unique_ptr<EtcdJournal> j(new EtcdJournal(std::move(etcd), std::move(prefix), std::move(term),
                                                 std::move(mirror), std::move(unsettled)));
  Result<std::vector<EtcdKv>> format = j->Read(j->prefix_ + "format");
  if (!format.ok()) return format.status();
  if (format->empty()) {
    if (!create) {
      return Status::NotFound("no controller state in " + j->path_ +
                              "; start the cluster with 'bulwark up --ha', or give the --etcd endpoints and "
                              "--etcd-prefix it was started with");
    }
    pb::TxnRequest txn = Fenced(j->term_);
    AddPut(&txn, j->prefix_ + "format", kFormat);
    BULWARK_RETURN_IF_ERROR(j->Commit(txn, "creating " + j->path_));
  } else if ((*format)[0].value != kFormat) {
    return Status::Corrupt(j->path_ + " holds format '" + (*format)[0].value + "', not " + kFormat +
                           ": it was not written by this version of bulwark");
  }
  return j;
}

std::string EtcdJournal::JournalPrefix(const std::string& job) const { return prefix_ + "journal/" + job + "/"; }

std::string EtcdJournal::JournalKey(const std::string& job, int64_t seq) const {
  char digits[24];
  std::snprintf(digits, sizeof digits, "%016" PRId64, seq);
  return JournalPrefix(job) + digits;
}

Status EtcdJournal::PutMachine(const MachineRow& m) {
  pb::TxnRequest txn = Fenced(term_);
  AddPut(&txn, prefix_ + "machines/" + m.id,
         json{{"dir", m.dir}, {"registered_ms", m.registered_ms}, {"shard_addr", m.shard_addr}}.dump());
  return Commit(txn, "recording machine " + m.id);
}

Result<std::vector<MachineRow>> EtcdJournal::Machines() const {
  const std::string dir = prefix_ + "machines/";
  Result<std::vector<EtcdKv>> kvs = Read(dir, PrefixEnd(dir));
  if (!kvs.ok()) return kvs.status().Annotate("listing machines");
  std::vector<MachineRow> out;
  for (const EtcdKv& kv : *kvs) {
    Result<MachineRow> m = Parse<MachineRow>(kv, path_, [&](const json& j) {
      return MachineRow{kv.key.substr(dir.size()), j.at("dir").get<std::string>(), j.at("registered_ms").get<int64_t>(),
                        j.value("shard_addr", "")};
    });
    if (!m.ok()) return m.status();
    out.push_back(std::move(*m));
  }
  return out;
}

Status EtcdJournal::PutJob(const JobRow& job) {
  pb::TxnRequest txn = Fenced(term_);
  pb::Compare* none = txn.add_compare();
  none->set_key(prefix_ + "job");
  none->set_target(pb::Compare::CREATE);
  none->set_result(pb::Compare::EQUAL);
  none->set_create_revision(0);
  AddPut(&txn, prefix_ + "job", json{{"id", job.id}, {"spec", job.spec_json}, {"created_ms", job.created_ms}}.dump());
  Status st = Commit(txn, "recording job " + job.id);
  if (st.code() != Status::Code::kFailedPrecondition) return st;
  // Which compare failed: a job already there is the caller's mistake.
  // From etcd itself: the write that failed may have landed unseen.
  Result<std::optional<JobRow>> existing = ReadJob(/*from_etcd=*/true);
  // A retried txn whose first try landed (etcd_client.h, set_retry_for).
  if (existing.ok() && existing->has_value() && (*existing)->id == job.id && (*existing)->spec_json == job.spec_json &&
      (*existing)->created_ms == job.created_ms) {
    return Status::OK();
  }
  if (existing.ok() && existing->has_value()) {
    return Status::FailedPrecondition("job " + (*existing)->id +
                                      " is already submitted to this cluster; one job per cluster: "
                                      "run 'bulwark down' and 'bulwark up' for a new one");
  }
  return st;
}

Result<std::optional<JobRow>> EtcdJournal::Job() const { return ReadJob(/*from_etcd=*/false); }

Result<std::optional<JobRow>> EtcdJournal::ReadJob(bool from_etcd) const {
  Result<std::vector<EtcdKv>> kvs = from_etcd ? etcd_->Range(prefix_ + "job") : Read(prefix_ + "job");
  if (!kvs.ok()) return kvs.status().Annotate("reading the job");
  if (kvs->empty()) return std::optional<JobRow>();
  Result<JobRow> row = Parse<JobRow>((*kvs)[0], path_, [](const json& j) {
    return JobRow{j.at("id").get<std::string>(), j.at("spec").get<std::string>(), j.at("created_ms").get<int64_t>()};
  });
  if (!row.ok()) return row.status();
  return std::optional<JobRow>(std::move(*row));
}

Result<int64_t> EtcdJournal::NextSeq(const std::string& job) {
  {
    MutexLock lock(&mu_);
    auto it = next_seq_.find(job);
    if (it != next_seq_.end()) return it->second++;
  }
  Result<std::optional<EtcdKv>> last = etcd_->LastWithPrefix(JournalPrefix(job));
  if (!last.ok()) return last.status();
  int64_t next = 1;
  if (last->has_value()) next = std::stoll((*last)->key.substr(JournalPrefix(job).size())) + 1;
  MutexLock lock(&mu_);
  next_seq_[job] = next + 1;
  return next;
}

Status EtcdJournal::Append(const std::string& job, int64_t now_ms, const std::string& record) {
  Result<int64_t> seq = NextSeq(job);
  if (!seq.ok()) return seq.status().Annotate("appending to the journal of job " + job);
  pb::TxnRequest txn = Fenced(term_);
  AddPut(&txn, JournalKey(job, *seq), json{{"now_ms", now_ms}, {"record", record}}.dump());
  Status st = Commit(txn, "appending to the journal of job " + job);
  if (!st.ok()) {
    // Unknown whether it landed (a timeout may still commit): read the last
    // seq again before the next append rather than leave a gap or reuse one.
    MutexLock lock(&mu_);
    next_seq_.erase(job);
  }
  return st;
}

Result<std::vector<JournalEntry>> EtcdJournal::Journal(const std::string& job) const {
  const std::string dir = JournalPrefix(job);
  Result<std::vector<EtcdKv>> kvs = Read(dir, PrefixEnd(dir));
  if (!kvs.ok()) return kvs.status().Annotate("reading the journal of job " + job);
  std::vector<JournalEntry> out;
  out.reserve(kvs->size());
  for (const EtcdKv& kv : *kvs) {
    Result<JournalEntry> e = Parse<JournalEntry>(kv, path_, [&](const json& j) {
      return JournalEntry{std::stoll(kv.key.substr(dir.size())), j.at("now_ms").get<int64_t>(),
                          j.at("record").get<std::string>()};
    });
    if (!e.ok()) return e.status();
    out.push_back(std::move(*e));
  }
  return out;
}

Status EtcdJournal::DropJournalRows(const std::string& job, const std::vector<int64_t>& seqs) {
  std::vector<int64_t> sorted = seqs;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::pair<int64_t, int64_t>> runs;  // [first, last]
  for (int64_t s : sorted) {
    if (!runs.empty() && runs.back().second + 1 == s) {
      runs.back().second = s;
    } else {
      runs.push_back({s, s});
    }
  }
  for (size_t i = 0; i < runs.size(); i += kRangesPerTxn) {
    pb::TxnRequest txn = Fenced(term_);
    for (size_t k = i; k < std::min(runs.size(), i + kRangesPerTxn); ++k) {
      pb::DeleteRangeRequest* del = txn.add_success()->mutable_request_delete_range();
      del->set_key(JournalKey(job, runs[k].first));
      del->set_range_end(JournalKey(job, runs[k].second + 1));
    }
    BULWARK_RETURN_IF_ERROR(Commit(txn, "compacting the journal of job " + job));
  }
  return Status::OK();
}

Status EtcdJournal::RemoveAll() {
  pb::TxnRequest txn = Fenced(term_);
  pb::DeleteRangeRequest* del = txn.add_success()->mutable_request_delete_range();
  del->set_key(prefix_);
  del->set_range_end(PrefixEnd(prefix_));
  return Commit(txn, "removing " + path_);
}

Status EtcdJournal::PutSnapshot(const std::string& name, const std::string& json_text) {
  pb::TxnRequest txn = Fenced(term_);
  AddPut(&txn, prefix_ + "snapshots/" + name, json_text);
  return Commit(txn, "writing snapshot " + name);
}

Result<std::optional<std::string>> EtcdJournal::Snapshot(const std::string& name) const {
  Result<std::vector<EtcdKv>> kvs = Read(prefix_ + "snapshots/" + name);
  if (!kvs.ok()) return kvs.status().Annotate("reading snapshot " + name);
  if (kvs->empty()) return std::optional<std::string>();
  return std::optional<std::string>((*kvs)[0].value);
}

}  // namespace bulwark::plane
