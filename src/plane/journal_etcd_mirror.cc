#include "plane/journal_etcd_mirror.h"

#include "common/log.h"

namespace bulwark::plane {

Result<std::unique_ptr<EtcdMirror>> EtcdMirror::Start(std::shared_ptr<const EtcdClient> etcd, std::string prefix) {
  std::unique_ptr<EtcdMirror> m(new EtcdMirror(std::move(etcd), std::move(prefix)));
  BULWARK_RETURN_IF_ERROR(m->Load());
  m->follower_ = std::thread([p = m.get()] { p->Follow(); });
  return m;
}

EtcdMirror::~EtcdMirror() {
  stop_ = true;
  if (follower_.joinable()) follower_.join();
}

Status EtcdMirror::Load() {
  int64_t at = 0;
  Result<std::vector<EtcdKv>> all = etcd_->Range(prefix_, PrefixEnd(prefix_), &at);
  if (!all.ok()) return all.status().Annotate("mirroring " + prefix_);
  std::map<std::string, EtcdKv> fresh;
  for (EtcdKv& kv : *all) fresh[kv.key] = std::move(kv);
  MutexLock lock(&mu_);
  kvs_ = std::move(fresh);
  revision_ = at;
  changed_.NotifyAll();
  return Status::OK();
}

void EtcdMirror::Follow() {
  while (!stop_) {
    const int64_t from = revision() + 1;
    etcd_->Watch(prefix_, from, [this](const std::vector<EtcdEvent>& batch) { Apply(batch); }, stop_);
    // The stream broke (a member lost, etcd's history compacted, silence):
    // read everything again, from whichever member answers, and resume.
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (Status st = Load(); st.ok()) break;
    }
  }
}

void EtcdMirror::Apply(const std::vector<EtcdEvent>& batch) {
  MutexLock lock(&mu_);
  for (const EtcdEvent& e : batch) {
    if (e.deleted) {
      kvs_.erase(e.kv.key);
    } else {
      kvs_[e.kv.key] = e.kv;
    }
    revision_ = std::max(revision_, e.kv.mod_revision);
  }
  applied_ += static_cast<int64_t>(batch.size());
  changed_.NotifyAll();
}

bool EtcdMirror::WaitFor(int64_t revision, std::chrono::milliseconds timeout) const {
  const auto until = std::chrono::steady_clock::now() + timeout;
  MutexLock lock(&mu_);
  while (revision_ < revision) {
    if (!changed_.WaitUntil(&mu_, until) && revision_ < revision) return false;
  }
  return true;
}

std::vector<EtcdKv> EtcdMirror::Range(const std::string& key, const std::string& end) const {
  MutexLock lock(&mu_);
  std::vector<EtcdKv> out;
  if (end.empty()) {
    auto it = kvs_.find(key);
    if (it != kvs_.end()) out.push_back(it->second);
    return out;
  }
  for (auto it = kvs_.lower_bound(key); it != kvs_.end() && it->first < end; ++it) out.push_back(it->second);
  return out;
}

void EtcdMirror::NoteWritten(int64_t revision) const {
  int64_t seen = written_.load();
  while (seen < revision && !written_.compare_exchange_weak(seen, revision)) {
  }
}

int64_t EtcdMirror::revision() const {
  MutexLock lock(&mu_);
  return revision_;
}

}  // namespace bulwark::plane
