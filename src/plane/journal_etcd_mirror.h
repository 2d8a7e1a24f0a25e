// EtcdMirror: a standby controller's copy of the cluster's state in etcd
// (journal_etcd.h), kept current by a watch on the prefix, so that taking
// over reads the journal from memory: the lease wait plus the replay, not
// a read of every row from etcd after the lease is won.
//
// Consistency: a new leader's own leader key is written under the prefix at
// its term's revision, and every write of the deposed leader that etcd
// accepted precedes it (each was fenced on the old term). So once the mirror
// has applied the term's revision it holds everything the predecessor
// wrote; after that the new leader's reads wait for its own last write
// (NoteWritten). A mirror that cannot show a revision in time
// says so, and the journal reads etcd instead.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "plane/etcd_client.h"

namespace bulwark::plane {

class EtcdMirror {
 public:
  // Reads everything under `prefix`, then follows it until destroyed.
  static Result<std::unique_ptr<EtcdMirror>> Start(std::shared_ptr<const EtcdClient> etcd, std::string prefix);
  ~EtcdMirror();
  EtcdMirror(const EtcdMirror&) = delete;
  EtcdMirror& operator=(const EtcdMirror&) = delete;

  // True once every change up to `revision` is applied; false after
  // `timeout` (a stream being reopened, etcd unreachable).
  bool WaitFor(int64_t revision, std::chrono::milliseconds timeout) const EXCLUDES(mu_);
  // The keys in [key, end) ("": the key alone), by key, as last applied.
  std::vector<EtcdKv> Range(const std::string& key, const std::string& end = "") const EXCLUDES(mu_);
  int64_t revision() const EXCLUDES(mu_);
  // A journal of this process wrote under the prefix at `revision`: reads
  // through the mirror wait for it from then on, whichever journal
  // instance reads (one reopened in the same term included).
  void NoteWritten(int64_t revision) const;
  int64_t written() const { return written_; }
  // How many changes the watch has applied since the start (for the bench).
  int64_t applied() const { return applied_; }

 private:
  EtcdMirror(std::shared_ptr<const EtcdClient> etcd, std::string prefix)
      : etcd_(std::move(etcd)), prefix_(std::move(prefix)) {}
  Status Load() EXCLUDES(mu_);
  void Follow();
  void Apply(const std::vector<EtcdEvent>& batch) EXCLUDES(mu_);

  const std::shared_ptr<const EtcdClient> etcd_;
  const std::string prefix_;
  mutable Mutex mu_;
  mutable CondVar changed_;
  std::map<std::string, EtcdKv> kvs_ GUARDED_BY(mu_);
  int64_t revision_ GUARDED_BY(mu_) = 0;
  std::atomic<int64_t> applied_{0};
  // A note about etcd, not the mirror's state: set through const handles.
  mutable std::atomic<int64_t> written_{0};
  std::atomic<bool> stop_{false};
  std::thread follower_;
};

}  // namespace bulwark::plane
