#include "agent/shard_store.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <thread>

#include "agent/shard_store_impl.h"
#include "agent/shard_transfer.h"
#include "rank_client/shard_client.h"
#include "rank_client/shard_image.h"
#include "rank_client/shard_region.h"
#include "rank_client/shard_socket.h"
#include "common/files.h"

namespace bulwark::agent {

using rank_client::ShardRegion;

namespace {

constexpr int kDurableKeep = 2;  // persisted steps kept per rank

// The newest sealed image of `rank` in `r` (-1: none). A rank's region may
// also hold the backup of another rank that it wrote itself.
int64_t NewestStep(const RegionPtr& r, int rank) {
  if (!r) return -1;
  for (const auto& s : r->SealedSlots())
    if (s.info.rank == rank) return s.info.step;
  return -1;
}

bool HoldsRank(const RegionPtr& r, int rank) { return NewestStep(r, rank) >= 0; }

}  // namespace

void ShardStore::Impl::Wake() {
  char c = 1;
  (void)!::write(wake_[1], &c, 1);
}

void ShardStore::Impl::LocalLoop() {
  for (;;) {
    std::vector<pollfd> fds{{unix_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    std::vector<int64_t> ids;
    {
      MutexLock lock(&mu_);
      if (stop_) return;
      for (auto& [id, fd] : conns_) {
        fds.push_back({fd, POLLIN, 0});
        ids.push_back(id);
      }
    }
    if (::poll(fds.data(), fds.size(), 500) < 0) continue;
    if (fds[1].revents & POLLIN) {
      char buf[64];
      (void)!::read(wake_[0], buf, sizeof buf);
      AnswerWaiting();
    }
    if (fds[0].revents & POLLIN) {
      int c = ::accept4(unix_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c >= 0) {
        MutexLock lock(&mu_);
        conns_[next_conn_++] = c;
      }
    }
    for (size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      int fd = -1;
      auto msg = rank_client::RecvShardMessage(fds[i].fd, &fd, 0);
      if (!msg.ok()) {
        MutexLock lock(&mu_);
        ::close(fds[i].fd);
        conns_.erase(ids[i - 2]);
        owner_.erase(ids[i - 2]);
        continue;
      }
      Handle(ids[i - 2], fds[i].fd, *msg, fd);
    }
  }
}

void ShardStore::Impl::Handle(int64_t conn, int sock, const std::string& msg, int fd) {
  auto w = rank_client::SplitWords(msg);
  if (w.size() == 3 && w[0] == "RESTORE") {
    int rank = std::atoi(w[1].c_str());
    MutexLock lock(&mu_);
    if (fetching_) {
      waiting_.emplace_back(conn, rank);
    } else {
      OfferLocked(sock, rank);
    }
  } else if (w.size() >= 3 && w[0] == "REGION" && fd >= 0) {
    int rank = std::atoi(w[1].c_str());
    const bool peer_writes = w.size() == 4 && w[3] == "PEERWRITES";
    auto region = ShardRegion::Map(fd);
    if (!region.ok()) {
      (void)rank_client::SendShardMessage(sock, "ERROR " + region.status().message());
      return;
    }
    MutexLock lock(&mu_);
    Primary& p = primaries_[rank];
    // The previous run's images stay until this run seals one: a crash
    // before that must still find them.
    if (p.current && !p.current->SealedSlots().empty()) p.previous = p.current;
    p.current = std::make_shared<ShardRegion>(std::move(*region));
    p.peer_writes = peer_writes;
    world_size_ = std::atoi(w[2].c_str());
    largest_local_ = std::max(largest_local_, p.current->slot_capacity());
    owner_[conn] = rank;
    (void)rank_client::SendShardMessage(sock, "OK");
  } else if (w.size() == 3 && w[0] == "SAVED") {
    int slot = std::atoi(w[1].c_str());
    int64_t step = std::atoll(w[2].c_str());
    MutexLock lock(&mu_);
    auto owner = owner_.find(conn);
    auto p = owner == owner_.end() ? primaries_.end() : primaries_.find(owner->second);
    rank_client::ShardInfo info;
    if (p != primaries_.end() && p->second.current && slot >= 0 && slot < p->second.current->num_slots() &&
        rank_client::PeekShardHeader(p->second.current->slot(slot), p->second.current->slot_capacity(), &info, nullptr) &&
        info.step == step && info.rank == owner->second) {
      p->second.previous.reset();
      work_.push_back({info.rank, slot, step, p->second.current, conn, !p->second.peer_writes});
      work_cv_.NotifyAll();
      return;
    }
    // Another rank's backup written here from replicated state (it is
    // where it must be already), or nothing we know: release at once.
    (void)rank_client::SendShardMessage(sock, "RELEASED " + w[1]);
  } else if (fd >= 0) {
    ::close(fd);
  }
}

void ShardStore::Impl::OfferLocked(int sock, int rank) {
  auto offer = [&](const RegionPtr& r, const std::string& source) {
    if (HoldsRank(r, rank)) (void)rank_client::SendShardMessage(sock, "COPY " + source, r->fd());
  };
  // Its own region first, then any other rank's that holds its backup.
  auto p = primaries_.find(rank);
  if (p != primaries_.end()) {
    offer(p->second.current, "memory");
    offer(p->second.previous, "memory");
  }
  for (const auto& [owner, other] : primaries_) {
    if (owner == rank) continue;
    offer(other.current, "memory");
    offer(other.previous, "memory");
  }
  auto b = backups_.find(rank);
  if (b != backups_.end()) offer(b->second, "memory");
  for (const Fetched& f : fetched_[rank]) offer(f.region, "peer:" + f.machine);
  if (!routes_.durable_dir.empty()) (void)rank_client::SendShardMessage(sock, "DURABLE " + routes_.durable_dir);
  (void)rank_client::SendShardMessage(sock, "END");
}

void ShardStore::Impl::AnswerWaiting() {
  MutexLock lock(&mu_);
  if (fetching_) return;
  for (auto& [conn, rank] : waiting_) {
    auto it = conns_.find(conn);
    if (it != conns_.end()) OfferLocked(it->second, rank);
  }
  waiting_.clear();
}

void ShardStore::Impl::WorkLoop() {
  rank_client::LowerThreadPriority();
  MutexLock lock(&mu_);
  for (;;) {
    while (!stop_ && work_.empty()) work_cv_.Wait(&mu_);
    if (stop_) return;
    Work w = work_.front();
    work_.pop_front();
    bool superseded = false;
    for (const Work& later : work_) superseded |= later.rank == w.rank;
    if (superseded) {
      ++stats_.superseded;
    } else {
      // Sending and persisting take milliseconds to seconds: not under mu_.
      ShardRoutes routes = routes_;
      processing_ = true;
      mu_.Unlock();
      Process(w, routes);
      mu_.Lock();
      processing_ = false;
      processed_.NotifyAll();
    }
    auto it = conns_.find(w.conn);
    if (it != conns_.end()) (void)rank_client::SendShardMessage(it->second, "RELEASED " + std::to_string(w.slot));
  }
}

void ShardStore::Impl::Process(const Work& w, const ShardRoutes& routes) {
  const uint8_t* image = w.region->slot(w.slot);
  size_t bytes = 0;
  if (!rank_client::PeekShardHeader(image, w.region->slot_capacity(), nullptr, &bytes)) return;
  if (w.push && !routes.backup_addr.empty()) {
    auto t = Clock::now();
    Status st = Push(routes.backup_addr, w.rank, w.step, image, bytes);
    MutexLock lock(&mu_);
    if (st.ok()) {
      ++stats_.pushed;
      stats_.last_push_ms = MsSince(t);
      stats_.push.Observe(stats_.last_push_ms);
      if (stats_.push_failures > 0) log_("backups to " + routes.backup_machine + " flow again");
      stats_.push_failures = 0;
    } else {
      ++stats_.push_failures_total;
      // Logged when the failures start, not once a step while they last.
      if (stats_.push_failures++ == 0) {
        log_("backup of rank " + std::to_string(w.rank) + " to " + routes.backup_machine + " failed: " + st.ToString());
      }
    }
  }
  if (routes.persist_every > 0 && !routes.durable_dir.empty() && w.step % routes.persist_every == 0) {
    auto t = Clock::now();
    std::string path = rank_client::DurableShardPath(routes.durable_dir, w.step, w.rank);
    Status st = MakeDirs(path.substr(0, path.rfind('/')));
    if (st.ok()) st = WriteFileAtomic(path, image, bytes);
    if (st.ok()) Prune(routes.durable_dir, w.rank);
    MutexLock lock(&mu_);
    if (st.ok()) {
      ++stats_.persisted;
      stats_.last_persist_ms = MsSince(t);
      stats_.persist.Observe(stats_.last_persist_ms);
      log_("persisted rank " + std::to_string(w.rank) + " step " + std::to_string(w.step) + " (" +
           std::to_string(bytes >> 20) + " MiB) in " + std::to_string(static_cast<int>(stats_.last_persist_ms)) + " ms");
    } else {
      ++stats_.persist_failures;
      log_("persisting rank " + std::to_string(w.rank) + " step " + std::to_string(w.step) + " failed: " + st.ToString());
    }
  }
}

bool ShardStore::Impl::RemoveDurable(const std::string& dir, int64_t step, int rank) {
  const std::string path = rank_client::DurableShardPath(dir, step, rank);
  const bool removed = ::unlink(path.c_str()) == 0;
  ::rmdir(path.substr(0, path.rfind('/')).c_str());  // fails while other ranks' files remain
  return removed;
}

void ShardStore::Impl::Prune(const std::string& dir, int rank) {
  auto steps = rank_client::DurableSteps(dir, rank);  // newest first
  // The two newest at or below each step kept for a rollback: two, since
  // another rank's persist of the newest may have been superseded (its
  // worker fell behind), and the ranks restore only a step they all hold.
  std::set<int64_t> pinned;
  {
    MutexLock lock(&mu_);
    for (int64_t k : keep_steps_) {
      auto at = std::find_if(steps.begin(), steps.end(), [k](int64_t s) { return s <= k; });
      for (int n = 0; n < 2 && at != steps.end(); ++n, ++at) pinned.insert(*at);
    }
  }
  for (size_t i = kDurableKeep; i < steps.size(); ++i) {
    if (!pinned.count(steps[i])) RemoveDurable(dir, steps[i], rank);
  }
}

Result<std::unique_ptr<ShardStore>> ShardStore::Start(const std::string& machine, const std::string& socket_path,
                                                      const std::string& host, const std::string& token,
                                                      std::function<void(const std::string&)> log) {
  if (token.empty()) return Status::InvalidArgument("the shard store needs the cluster token to authenticate peers");
  auto impl = std::make_unique<Impl>();
  impl->machine_ = machine;
  impl->token_ = token;
  impl->socket_path_ = socket_path;
  impl->host_ = host;
  impl->log_ = std::move(log);
  auto u = rank_client::ListenShardSocket(socket_path);
  if (!u.ok()) return u.status();
  impl->unix_fd_ = *u;
  struct stat bound {};
  if (::stat(socket_path.c_str(), &bound) == 0) impl->socket_ino_ = bound.st_ino;
  auto t = ListenTcp(host, &impl->tcp_port_);
  if (!t.ok()) return t.status();
  impl->tcp_fd_ = *t;
  if (::pipe2(impl->wake_, O_CLOEXEC) != 0) return Status::IOError("pipe for the shard store");
  Impl* p = impl.get();
  p->local_ = std::thread([p] { p->LocalLoop(); });
  p->tcp_ = std::thread([p] { p->TcpLoop(); });
  p->worker_ = std::thread([p] { p->WorkLoop(); });
  return std::unique_ptr<ShardStore>(new ShardStore(std::move(impl)));
}

ShardStore::ShardStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ShardStore::~ShardStore() {
  {
    MutexLock lock(&impl_->mu_);
    impl_->stop_ = true;
    impl_->stopping_ = true;
    impl_->CancelFetchesLocked();
  }
  impl_->work_cv_.NotifyAll();
  impl_->Wake();
  for (std::thread* t : {&impl_->local_, &impl_->tcp_, &impl_->worker_})
    if (t->joinable()) t->join();
  {
    MutexLock lock(&impl_->mu_);
    while (impl_->serving_ != 0) impl_->served_.Wait(&impl_->mu_);
    while (impl_->fetchers_ != 0) impl_->fetchers_done_.Wait(&impl_->mu_);
  }
  if (impl_->push_fd_ >= 0) ::close(impl_->push_fd_);
  for (auto& [id, fd] : impl_->conns_) ::close(fd);
  for (int fd : {impl_->unix_fd_, impl_->tcp_fd_, impl_->wake_[0], impl_->wake_[1]})
    if (fd >= 0) ::close(fd);
  // Only the socket this store bound: an agent started on the same machine
  // directory since (a restart racing its predecessor's exit) has bound a
  // new one at the same path, and its ranks need it.
  struct stat now {};
  if (::stat(impl_->socket_path_.c_str(), &now) == 0 && now.st_ino == impl_->socket_ino_) {
    ::unlink(impl_->socket_path_.c_str());
  }
}

std::string ShardStore::addr() const { return impl_->host_ + ":" + std::to_string(impl_->tcp_port_); }

// Called on the agent's main loop, which must keep reporting: it cancels
// the previous fetch rather than wait for it (a fetch from a machine that
// just died waited out its connect: 9.6 s of silence, and an eviction).
void ShardStore::SetRoutes(const ShardRoutes& routes, const std::vector<int>& ranks) {
  Impl* p = impl_.get();
  int64_t gen = 0;
  {
    MutexLock lock(&p->mu_);
    gen = p->CancelFetchesLocked();
    p->routes_ = routes;
    for (int r : ranks) p->fetched_.erase(r);
    p->fetching_ = true;
    ++p->fetchers_;
  }
  std::thread([p, routes, ranks, gen] { p->FetchAll(routes, ranks, gen); }).detach();
}

std::vector<ShardHolding> ShardStore::Holdings() const {
  MutexLock lock(&impl_->mu_);
  // Newest step per (rank, backup?): a region's images of other ranks are
  // backups it wrote from replicated state.
  std::map<std::pair<int, bool>, int64_t> newest;
  auto scan = [&](const RegionPtr& r, int owner) {
    if (!r) return;
    for (const auto& s : r->SealedSlots()) {
      int64_t& n = newest.try_emplace({s.info.rank, owner < 0 || s.info.rank != owner}, -1).first->second;
      n = std::max(n, s.info.step);
    }
  };
  for (const auto& [rank, p] : impl_->primaries_) {
    scan(p.current, rank);
    scan(p.previous, rank);
  }
  for (const auto& [rank, r] : impl_->backups_) scan(r, -1);
  std::vector<ShardHolding> out;
  for (const auto& [key, step] : newest) out.push_back({key.first, step, key.second});
  return out;
}

ShardStats ShardStore::Stats() const {
  MutexLock lock(&impl_->mu_);
  return impl_->stats_;
}

void ShardStore::Forget() {
  {
    MutexLock lock(&impl_->mu_);
    impl_->CancelFetchesLocked();  // a fetch under way would bring copies back
    impl_->primaries_.clear();
    impl_->backups_.clear();
    impl_->fetched_.clear();
    impl_->work_.clear();
  }
  impl_->Wake();  // restores that waited for the cancelled fetch: nothing to offer
}

void ShardStore::KeepDurable(std::vector<int64_t> steps) {
  MutexLock lock(&impl_->mu_);
  impl_->keep_steps_ = std::move(steps);
}

int ShardStore::DiscardDurableAfter(const std::string& dir, const std::vector<int>& ranks, int64_t step) {
  {
    MutexLock lock(&impl_->mu_);
    impl_->work_.clear();
    while (impl_->processing_) impl_->processed_.Wait(&impl_->mu_);  // a persist under way lands first
  }
  int removed = 0;
  for (int rank : ranks) {
    for (int64_t s : rank_client::DurableSteps(dir, rank)) {
      if (s > step) removed += Impl::RemoveDurable(dir, s, rank);
    }
  }
  return removed;
}

std::optional<int64_t> ShardStore::Corrupt(int rank) {
  MutexLock lock(&impl_->mu_);
  auto p = impl_->primaries_.find(rank);
  if (p == impl_->primaries_.end()) return std::nullopt;
  for (const RegionPtr& r : {p->second.current, p->second.previous}) {
    if (!r) continue;
    for (const auto& s : r->SealedSlots()) {
      if (s.info.rank != rank) continue;  // its own newest, not a backup it wrote
      if (rank_client::CorruptShardImage(r->slot(s.slot), r->slot_capacity())) return s.info.step;
      break;
    }
  }
  return std::nullopt;
}

}  // namespace bulwark::agent
