// The store's side towards other agents: receiving pushed backups, serving
// copies to a machine about to restore, pushing and fetching (see
// shard_transfer.h for the stream format).
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>

#include "agent/shard_auth.h"
#include "agent/shard_store_impl.h"
#include "agent/shard_transfer.h"
#include "rank_client/shard_client.h"
#include "rank_client/shard_image.h"
#include "rank_client/shard_socket.h"

namespace bulwark::agent {

using rank_client::ShardHeader;
using rank_client::ShardRegion;

namespace {
// "127.0.0.1:40312", for refusal logs.
std::string PeerName(int fd) {
  sockaddr_in a{};
  socklen_t n = sizeof a;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &n) != 0 || a.sin_family != AF_INET) return "an unknown peer";
  char ip[INET_ADDRSTRLEN] = {0};
  ::inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
  return std::string(ip) + ":" + std::to_string(ntohs(a.sin_port));
}
}  // namespace

Status ShardStore::Impl::PushOnce(const std::string& addr, int rank, int64_t step, const uint8_t* image, size_t bytes) {
  if (push_fd_ < 0 || push_to_ != addr) {
    if (push_fd_ >= 0) ::close(push_fd_);
    push_fd_ = -1;
    auto fd = DialTcp(addr, kTransferTimeoutS, kConnectTimeoutMs);
    if (!fd.ok()) return fd.status();
    if (Status a = AuthenticateToPeer(*fd, token_); !a.ok()) {
      ::close(*fd);
      return a.Annotate("backup peer " + addr);
    }
    push_fd_ = *fd;
    push_to_ = addr;
  }
  std::string head = "PUSH " + std::to_string(rank) + " " + std::to_string(step) + " " + std::to_string(bytes) + "\n";
  Status st = SendAll(push_fd_, head.data(), head.size());
  if (st.ok()) st = SendAll(push_fd_, image, bytes);
  if (st.ok()) {
    auto reply = RecvLine(push_fd_);
    if (!reply.ok()) st = reply.status();
    else if (*reply != "OK") st = Status::Unavailable("backup peer answered: " + *reply);
  }
  if (!st.ok()) {
    ::close(push_fd_);
    push_fd_ = -1;
  }
  return st;
}

// A kept connection may have been closed by the peer meanwhile (it
// restarted): one retry on a fresh connection.
Status ShardStore::Impl::Push(const std::string& addr, int rank, int64_t step, const uint8_t* image, size_t bytes) {
  const bool fresh = push_fd_ < 0 || push_to_ != addr;
  Status st = PushOnce(addr, rank, step, image, bytes);
  if (!st.ok() && !fresh) st = PushOnce(addr, rank, step, image, bytes);
  return st;
}

void ShardStore::Impl::TcpLoop() {
  rank_client::LowerThreadPriority();
  for (;;) {
    {
      MutexLock lock(&mu_);
      if (stop_) return;
    }
    pollfd p{tcp_fd_, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    int c = ::accept4(tcp_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    SetTimeouts(c, kTransferTimeoutS);
    {
      MutexLock lock(&mu_);
      ++serving_;
    }
    std::thread([this, c] { ServeConnection(c); }).detach();
  }
}

// Requests on one connection until the peer closes it or the store stops.
void ShardStore::Impl::ServeConnection(int c) {
  rank_client::LowerThreadPriority();
  if (Status a = AcceptPeer(c, token_); !a.ok()) {
    log_("refused a shard connection from " + PeerName(c) + ": " + a.message());
    MutexLock lock(&mu_);
    ++stats_.refused;
    --serving_;
    served_.NotifyAll();
    ::close(c);
    return;
  }
  while (!stopping_) {
    pollfd p{c, POLLIN, 0};
    int r = ::poll(&p, 1, 500);
    if (r == 0) continue;
    char probe;
    if (r < 0 || ::recv(c, &probe, 1, MSG_PEEK) <= 0) break;  // closed between requests: the normal end
    Status st = Serve(c);
    if (!st.ok()) {
      log_("shard transfer from a peer failed: " + st.ToString());
      break;
    }
  }
  ::close(c);
  MutexLock lock(&mu_);
  --serving_;
  served_.NotifyAll();
}

Status ShardStore::Impl::Serve(int c) {
  auto line = RecvLine(c);
  if (!line.ok()) return line.status();
  auto w = rank_client::SplitWords(*line);
  if (w.size() == 4 && w[0] == "PUSH") return Receive(c, std::atoi(w[1].c_str()), std::strtoull(w[3].c_str(), nullptr, 10));
  if (w.size() == 2 && w[0] == "FETCH") return SendCopies(c, std::atoi(w[1].c_str()));
  return Status::InvalidArgument("unknown shard transfer request '" + *line + "'");
}

// Receives into the older of the rank's two backup slots; the header goes
// in last, so a transfer cut short never looks like a complete image.
Status ShardStore::Impl::AdmitPush(int rank, uint64_t bytes) {
  if (world_size_ <= 0) return Status::FailedPrecondition("no rank of a job runs here yet: nothing to back up for");
  if (rank < 0 || rank >= world_size_) {
    return Status::InvalidArgument("rank " + std::to_string(rank) + " is not in this job of " +
                                   std::to_string(world_size_) + " ranks");
  }
  if (bytes < sizeof(ShardHeader) || bytes > kMaxImageRatio * largest_local_) {
    return Status::InvalidArgument("an image of " + std::to_string(bytes) + " bytes for rank " + std::to_string(rank) +
                                   " exceeds " + std::to_string(kMaxImageRatio) + "x this job's largest local shard (" +
                                   std::to_string(largest_local_) + " bytes)");
  }
  return Status::OK();
}

Status ShardStore::Impl::Receive(int c, int rank, uint64_t bytes) {
  RegionPtr region;
  int slot = 0;
  int world = 0;
  {
    MutexLock lock(&mu_);
    world = world_size_;
    if (Status ok = AdmitPush(rank, bytes); !ok.ok()) {
      ++stats_.refused;
      (void)SendAll(c, "REFUSED\n", 8);
      return ok.Annotate("refused a pushed image");
    }
    RegionPtr& r = backups_[rank];
    if (!r || r->slot_capacity() < bytes) {
      auto made = ShardRegion::Create("bulwark-backup-rank-" + std::to_string(rank), bytes, 2);
      if (!made.ok()) return made.status();
      r = std::make_shared<ShardRegion>(std::move(*made));
    }
    region = r;
    auto sealed = region->SealedSlots();
    slot = region->OldestSlot(sealed.empty() ? -1 : sealed.front().slot);
  }
  uint8_t* dst = region->slot(slot);
  ShardHeader header;
  std::memset(dst, 0, sizeof header);  // unsealed while receiving
  BULWARK_RETURN_IF_ERROR(RecvAll(c, &header, sizeof header));
  // The image must be what the request line said: the rank and job it names.
  if (header.rank != rank || header.world_size != world || header.payload_bytes + sizeof header > bytes) {
    MutexLock lock(&mu_);
    ++stats_.refused;
    return Status::InvalidArgument("refused a pushed image: its header names rank " + std::to_string(header.rank) +
                                   " of " + std::to_string(header.world_size) + " with " +
                                   std::to_string(header.payload_bytes) + " payload bytes; the request said rank " +
                                   std::to_string(rank) + " in " + std::to_string(bytes) + " bytes");
  }
  BULWARK_RETURN_IF_ERROR(RecvAll(c, dst + sizeof header, bytes - sizeof header));
  uint64_t seal = header.header_checksum;
  header.header_checksum = 0;
  std::memcpy(dst, &header, sizeof header);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  std::memcpy(dst + offsetof(ShardHeader, header_checksum), &seal, sizeof seal);
  return SendAll(c, "OK\n", 3);
}

Status ShardStore::Impl::SendCopies(int c, int rank) {
  std::vector<std::pair<RegionPtr, int>> copies;
  {
    MutexLock lock(&mu_);
    auto add = [&](const RegionPtr& r) {
      if (!r) return;
      for (const auto& s : r->SealedSlots())
        if (s.info.rank == rank) copies.emplace_back(r, s.slot);
    };
    for (const auto& [owner, p] : primaries_) {
      add(p.current);
      add(p.previous);
    }
    auto b = backups_.find(rank);
    if (b != backups_.end()) add(b->second);
  }
  std::string head = "COPIES " + std::to_string(copies.size()) + "\n";
  BULWARK_RETURN_IF_ERROR(SendAll(c, head.data(), head.size()));
  for (auto& [r, slot] : copies) {
    size_t bytes = 0;
    std::vector<uint8_t> blank(sizeof(ShardHeader), 0);
    const uint8_t* src = r->slot(slot);
    // Overwritten since it was listed: send an unsealed header instead.
    if (!rank_client::PeekShardHeader(src, r->slot_capacity(), nullptr, &bytes)) {
      bytes = sizeof(ShardHeader);
      src = blank.data();
    }
    std::string line = "COPY " + std::to_string(bytes) + "\n";
    BULWARK_RETURN_IF_ERROR(SendAll(c, line.data(), line.size()));
    BULWARK_RETURN_IF_ERROR(SendAll(c, src, bytes));
  }
  return Status::OK();
}

// The socket is registered under its generation from before the connect, so
// a cancel (CancelFetchesLocked) can shut it down whatever it is waiting on.
Result<RegionPtr> ShardStore::Impl::Fetch(const ShardRoutes::Source& source, int64_t gen) {
  auto fd = TcpSocket();
  if (!fd.ok()) return fd.status();
  {
    MutexLock lock(&mu_);
    if (gen != fetch_gen_) {
      ::close(*fd);
      return Status::Unavailable("cancelled before it began");
    }
    fetch_socks_.emplace(gen, *fd);
  }
  Status st = ConnectTcp(*fd, source.addr, kTransferTimeoutS, kConnectTimeoutMs);
  if (st.ok()) st = AuthenticateToPeer(*fd, token_).Annotate("shard holder " + source.addr);
  Result<RegionPtr> got = st.ok() ? ReceiveCopies(*fd, source) : Result<RegionPtr>(st);
  {
    // Unregistered before it is closed: a cancel never shuts down a reused fd.
    MutexLock lock(&mu_);
    for (auto [it, end] = fetch_socks_.equal_range(gen); it != end; ++it) {
      if (it->second == *fd) {
        fetch_socks_.erase(it);
        break;
      }
    }
  }
  ::close(*fd);
  return got;
}

Result<RegionPtr> ShardStore::Impl::ReceiveCopies(int fd, const ShardRoutes::Source& source) {
  std::string req = "FETCH " + std::to_string(source.rank) + "\n";
  std::vector<std::string> images;
  Status st = SendAll(fd, req.data(), req.size());
  if (st.ok()) {
    auto head = RecvLine(fd);
    auto w = head.ok() ? rank_client::SplitWords(*head) : std::vector<std::string>{};
    if (!head.ok()) st = head.status();
    else if (w.size() != 2 || w[0] != "COPIES") st = Status::Corrupt("unexpected answer '" + *head + "'");
    for (int i = 0; st.ok() && i < std::atoi(w[1].c_str()); ++i) {
      auto line = RecvLine(fd);
      if (!line.ok()) {
        st = line.status();
        break;
      }
      auto lw = rank_client::SplitWords(*line);
      uint64_t n = lw.size() == 2 ? std::strtoull(lw[1].c_str(), nullptr, 10) : 0;
      if (n == 0 || n > (uint64_t{64} << 30)) {
        st = Status::Corrupt("bad copy header '" + *line + "'");
        break;
      }
      images.emplace_back(n, '\0');
      st = RecvAll(fd, images.back().data(), n);
    }
  }
  BULWARK_RETURN_IF_ERROR(st);
  if (images.empty()) return RegionPtr();
  size_t cap = 0;
  for (const auto& s : images) cap = std::max(cap, s.size());
  auto region = ShardRegion::Create("bulwark-fetched-rank-" + std::to_string(source.rank), cap,
                                    static_cast<int>(images.size()));
  if (!region.ok()) return region.status();
  for (size_t i = 0; i < images.size(); ++i) std::memcpy(region->slot(static_cast<int>(i)), images[i].data(), images[i].size());
  return std::make_shared<ShardRegion>(std::move(*region));
}

// A failed source costs only its copy: the next source, then the durable
// directory, is what the rank restores from. Every source is fetched at
// once (a machine's ranks restore from different peers, and a source that
// does not answer costs its connect deadline beside the others, not before
// them); the copies are kept in the routes' order, which is the order of
// preference. A cancelled generation's results are dropped: the newer one
// owns fetched_ and fetching_.
void ShardStore::Impl::FetchAll(ShardRoutes routes, std::vector<int> ranks, int64_t gen) {
  auto t = Clock::now();
  std::vector<const ShardRoutes::Source*> wanted;
  for (const auto& s : routes.restore_from) {
    if (std::find(ranks.begin(), ranks.end(), s.rank) != ranks.end()) wanted.push_back(&s);
  }
  std::vector<std::optional<Result<RegionPtr>>> got(wanted.size());
  {
    std::vector<std::thread> fetches;
    for (size_t i = 0; i < wanted.size(); ++i) fetches.emplace_back([&, i] { got[i] = Fetch(*wanted[i], gen); });
    for (auto& f : fetches) f.join();
  }
  bool current = false;
  {
    MutexLock lock(&mu_);
    current = gen == fetch_gen_;
    for (size_t i = 0; i < wanted.size(); ++i) {
      const ShardRoutes::Source& s = *wanted[i];
      Result<RegionPtr>& r = *got[i];
      const std::string what = "fetching rank " + std::to_string(s.rank) + "'s shard from " + s.machine;
      if (!current) {
        log_(what + " cancelled: newer routes (a restart, or the machine forgot its copies) replaced it");
      } else if (!r.ok()) {
        log_(what + " failed: " + r.status().ToString());
      } else if (*r) {
        fetched_[s.rank].push_back({s.machine, *r});
      }
    }
    if (current) {
      fetching_ = false;
      stats_.last_fetch_ms = MsSince(t);
    }
  }
  if (current) Wake();  // the restores waiting for it
  // Last: the destructor frees this once fetchers_ is 0.
  MutexLock lock(&mu_);
  --fetchers_;
  fetchers_done_.NotifyAll();
}

int64_t ShardStore::Impl::CancelFetchesLocked() {
  for (const auto& [gen, fd] : fetch_socks_) ::shutdown(fd, SHUT_RDWR);
  fetching_ = false;
  return ++fetch_gen_;
}

}  // namespace bulwark::agent
