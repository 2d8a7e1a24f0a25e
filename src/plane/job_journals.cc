#include "plane/job_journals.h"

#include <algorithm>
#include <filesystem>

#include "plane/etcd_client.h"
#include "plane/journal_etcd.h"
#include "plane/store.h"

namespace bulwark::plane {
namespace {

class SqliteJobs final : public JobJournals {
 public:
  explicit SqliteJobs(std::string dir) : dir_(std::move(dir)) {}

  Result<std::vector<std::string>> Names() const override {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
      if (entry.path().extension() == ".db") names.push_back(entry.path().stem().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }
  Result<std::unique_ptr<JournalStore>> Open(const std::string& name, bool create) const override {
    if (create) {
      std::error_code ec;
      std::filesystem::create_directories(dir_, ec);
      if (ec) return Status::IOError("jobs directory " + dir_ + ": " + ec.message());
    }
    return OpenSqliteJournal(Path(name), create);
  }
  Status Remove(const std::string& name) const override {
    std::error_code ec;
    for (const char* ext : {"", "-wal", "-shm"}) std::filesystem::remove(Path(name) + ext, ec);
    return ec ? Status::IOError(Path(name) + ": " + ec.message()) : Status::OK();
  }

 private:
  std::string Path(const std::string& name) const { return dir_ + "/" + name + ".db"; }
  const std::string dir_;
};

// Job NAME's keys are PREFIX/jobs/NAME/..., an EtcdJournal of their own
// under that prefix, fenced by the term's leader key.
class EtcdJobs final : public JobJournals {
 public:
  EtcdJobs(std::shared_ptr<const EtcdClient> etcd, std::string prefix, Term term,
           std::shared_ptr<UnsettledWrites> unsettled)
      : etcd_(std::move(etcd)), jobs_(std::move(prefix) + "jobs/"), term_(std::move(term)),
        unsettled_(std::move(unsettled)) {}

  // One key per job, skipping each job's keys: a job's journal holds
  // thousands of rows, and reading them all to learn names would be waste.
  Result<std::vector<std::string>> Names() const override {
    std::vector<std::string> names;
    std::string from = jobs_;
    const std::string end = PrefixEnd(jobs_);
    for (;;) {
      Result<std::optional<EtcdKv>> kv = etcd_->FirstKeyIn(from, end);
      if (!kv.ok()) return kv.status().Annotate("listing the fleet's jobs in etcd");
      if (!kv->has_value()) return names;
      const std::string rest = (*kv)->key.substr(jobs_.size());
      const std::string name = rest.substr(0, rest.find('/'));
      names.push_back(name);
      from = PrefixEnd(jobs_ + name + "/");
    }
  }
  Result<std::unique_ptr<JournalStore>> Open(const std::string& name, bool create) const override {
    Result<std::unique_ptr<EtcdJournal>> j = OpenEtcd(name, create);
    if (!j.ok()) return j.status();
    return std::unique_ptr<JournalStore>(std::move(*j));
  }
  Status Remove(const std::string& name) const override {
    Result<std::unique_ptr<EtcdJournal>> j = OpenEtcd(name, /*create=*/false);
    if (!j.ok()) return j.status().code() == Status::Code::kNotFound ? Status::OK() : j.status();
    return (*j)->RemoveAll();
  }

 private:
  // Reads come from etcd: the standby's mirror follows the main prefix's
  // reads, and a job's plane reads its journal once, at its start.
  Result<std::unique_ptr<EtcdJournal>> OpenEtcd(const std::string& name, bool create) const {
    return EtcdJournal::Open(etcd_, jobs_ + name + "/", term_, create, nullptr, unsettled_);
  }
  const std::shared_ptr<const EtcdClient> etcd_;
  const std::string jobs_;
  const Term term_;
  const std::shared_ptr<UnsettledWrites> unsettled_;
};

}  // namespace

std::shared_ptr<const JobJournals> SqliteJobJournals(std::string dir) {
  return std::make_shared<SqliteJobs>(std::move(dir));
}

std::shared_ptr<const JobJournals> EtcdJobJournals(std::shared_ptr<const EtcdClient> etcd, std::string prefix,
                                                   Term term, std::shared_ptr<UnsettledWrites> unsettled) {
  return std::make_shared<EtcdJobs>(std::move(etcd), std::move(prefix), std::move(term), std::move(unsettled));
}

}  // namespace bulwark::plane
