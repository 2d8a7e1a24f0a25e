// The ring communicator (ring.h): links kept between generations, a
// generation's forming, and frames stamped with its nonce. The collectives
// and point-to-point messages built on them are in ring_ops.cc.
#include "trainer/comm/ring.h"

#include "trainer/comm/ring_wire.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/uio.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <stdexcept>

namespace bulwark::trainer {

namespace ring_wire {

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

int MsLeft(double deadline) {
  const double left = deadline - Now();
  return left <= 0 ? 0 : static_cast<int>(left * 1000) + 1;
}

std::string Errno(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

Status WriteAll(int fd, const char* p, size_t n, double deadline, size_t* done, const std::atomic<bool>* cancel) {
  *done = 0;
  while (*done < n) {
    if (cancel != nullptr && cancel->load()) return Status::Unavailable("send cancelled: the generation ended");
    const ssize_t k = ::send(fd, p + *done, n - *done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      *done += static_cast<size_t>(k);
      continue;
    }
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return Status::Unavailable(Errno("send"));
    pollfd pfd{fd, POLLOUT, 0};
    if (::poll(&pfd, 1, std::min(MsLeft(deadline), 100)) == 0 && MsLeft(deadline) == 0) {
      return Status::Unavailable("send timed out");
    }
  }
  return Status::OK();
}

}  // namespace ring_wire

using namespace ring_wire;

namespace {

// Reads exactly n bytes by the deadline; EOF before them is an error.
Status ReadAll(int fd, char* p, size_t n, double deadline) {
  for (size_t got = 0; got < n;) {
    const ssize_t k = ::recv(fd, p + got, n - got, MSG_DONTWAIT);
    if (k > 0) {
      got += static_cast<size_t>(k);
      continue;
    }
    if (k == 0) return Status::Unavailable("the peer closed the link");
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return Status::Unavailable(Errno("recv"));
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, MsLeft(deadline)) == 0) return Status::Unavailable("receive timed out");
  }
  return Status::OK();
}

// A chunk of a step's gradients (about a megabyte at the tiny config's
// 3 replicas) fits in the socket's buffers, so it goes in one write and
// one or two reads instead of a wake-up of the peer every 16 KB: on a
// loaded host each wake-up waits for a core. Set before connect or listen,
// so the window scaling agreed at the handshake allows it.
void LargeBuffers(int fd) {
  int size = 4 << 20;  // the kernel caps it at net.core.{w,r}mem_max
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
}

void NonBlocking(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// The IPv4 address this process's peers reach it at (ring.h, Listen).
Result<std::string> OwnAddress(const std::string& master_addr) {
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  if (ifname != nullptr && *ifname != '\0') {
    ifaddrs* all = nullptr;
    if (::getifaddrs(&all) != 0) return Status::Unavailable(Errno("getifaddrs"));
    std::string found;
    for (ifaddrs* a = all; a != nullptr && found.empty(); a = a->ifa_next) {
      if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET || std::strcmp(a->ifa_name, ifname) != 0) continue;
      char buf[INET_ADDRSTRLEN];
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf, sizeof(buf));
      found = buf;
    }
    ::freeifaddrs(all);
    if (found.empty()) {
      return Status::InvalidArgument(std::string("GLOO_SOCKET_IFNAME=") + ifname +
                                     " names no interface with an IPv4 address; set it to this machine's link");
    }
    return found;
  }
  if (master_addr == "127.0.0.1" || master_addr == "localhost") return std::string("127.0.0.1");
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  if (::getaddrinfo(host, nullptr, &hints, &res) != 0 || res == nullptr) {
    return Status::Unavailable(std::string("the hostname ") + host + " does not resolve to an IPv4 address");
  }
  char buf[INET_ADDRSTRLEN];
  ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr, buf, sizeof(buf));
  ::freeaddrinfo(res);
  return std::string(buf);
}

sockaddr_in Parse(const std::string& identity) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  const size_t colon = identity.rfind(':');
  ::inet_pton(AF_INET, identity.substr(0, colon).c_str(), &a.sin_addr);
  a.sin_port = htons(static_cast<uint16_t>(std::atoi(identity.c_str() + colon + 1)));
  return a;
}

std::string Bytes(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }
std::vector<uint8_t> Bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

}  // namespace

// ---------------------------------------------------------------- RingLinks

Result<std::unique_ptr<RingLinks>> RingLinks::Listen(const std::string& master_addr) {
  auto addr = OwnAddress(master_addr);
  if (!addr.ok()) return addr.status();
  return Bind(*addr + ":0", 0);
}

Result<std::unique_ptr<RingLinks>> RingLinks::ListenAt(const std::string& identity, double timeout_s) {
  return Bind(identity, timeout_s);
}

// Binds `where` ("addr:port"). A slot's fixed port may still be held for a
// moment by the process that held the rank before (the agent is ending it),
// so EADDRINUSE is retried for `timeout_s`.
Result<std::unique_ptr<RingLinks>> RingLinks::Bind(const std::string& where, double timeout_s) {
  std::unique_ptr<RingLinks> l(new RingLinks());
  l->listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (l->listen_fd_ < 0) return Status::Unavailable(Errno("ring listener socket"));
  LargeBuffers(l->listen_fd_);  // accepted links inherit them
  // SO_REUSEPORT: the agent holds the slot's port reserved (bound, never
  // listening: agent.cc), and this process listens on it beside.
  const int one = 1;
  ::setsockopt(l->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (timeout_s > 0) ::setsockopt(l->listen_fd_, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
  sockaddr_in a = Parse(where);
  const double deadline = Now() + timeout_s;
  while (::bind(l->listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    if (errno != EADDRINUSE || Now() >= deadline) {
      return Status::Unavailable(Errno(("listening for ring links on " + where).c_str()));
    }
    ::poll(nullptr, 0, 20);
  }
  socklen_t len = sizeof(a);
  if (::listen(l->listen_fd_, 256) != 0 || ::getsockname(l->listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    return Status::Unavailable(Errno(("listening for ring links on " + where).c_str()));
  }
  l->identity_ = where.substr(0, where.rfind(':')) + ":" + std::to_string(ntohs(a.sin_port));
  return l;
}

RingLinks::~RingLinks() {
  for (auto& [k, fd] : fds_) ::close(fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void RingLinks::Add(const Key& k, int fd) {
  fds_[k] = fd;
  fresh_.insert(fd);
  ++made_;
}

void RingLinks::CloseFd(int fd) {
  for (auto it = fds_.begin(); it != fds_.end(); ++it) {
    if (it->second == fd) {
      Close(Key(it->first));
      return;
    }
  }
}

void RingLinks::Close(const Key& k) {
  auto it = fds_.find(k);
  if (it == fds_.end()) return;
  ::close(it->second);
  fresh_.erase(it->second);
  fds_.erase(it);
}

// --------------------------------------------------------------------- Ring

Ring::Ring(c10d::Store* store, int rank, int world, double timeout_s, RingLinks& links)
    : store_(store), rank_(rank), world_(world), timeout_s_(timeout_s), links_(links) {}

double Ring::Deadline() const { return Now() + timeout_s_; }

Result<std::unique_ptr<Ring>> Ring::Form(c10d::Store& store, int rank, int world, double timeout_s,
                                         RingLinks& links) {
  std::unique_ptr<Ring> r(new Ring(&store, rank, world, timeout_s, links));
  if (world == 1) return Finish(std::move(r));
  try {
    store.set("bulwark-ring/" + std::to_string(rank), Bytes(links.identity()));
    if (rank == 0) {
      std::random_device rd;
      const uint64_t n = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(Now() * 1e9);
      store.set("bulwark-ring/nonce", Bytes(std::to_string(n)));
    }
    r->nonce_ = std::stoull(Bytes(store.get("bulwark-ring/nonce")));
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (auto nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
    return Status::Unavailable("forming the ring failed on rank " + std::to_string(rank) + ": " + what);
  }
  return Finish(std::move(r));
}

Result<std::unique_ptr<Ring>> Ring::Form(const RingPlan& plan, int rank, int world, double timeout_s,
                                         RingLinks& links) {
  std::unique_ptr<Ring> r(new Ring(nullptr, rank, world, timeout_s, links));
  r->nonce_ = plan.nonce;
  r->identities_ = plan.identities;
  r->identities_[rank] = links.identity();
  // The controller's layout: every rank's plan was cut by it.
  links.group_ = plan.group;
  r->view_ = plan.layout;
  return Finish(std::move(r));
}

// The neighbours' addresses (from the store or the plan), then the links.
Result<std::unique_ptr<Ring>> Ring::Finish(std::unique_ptr<Ring> r) {
  RingLinks& links = r->links_;
  links.kept_ = links.made_ = links.dialled_ = 0;
  links.fresh_.clear();
  const int rank = r->rank_, world = r->world_;
  if (world == 1) return r;
  try {
    BULWARK_RETURN_IF_ERROR(r->FormLayout());
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (auto nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
    return Status::Unavailable("forming the ring failed on rank " + std::to_string(rank) + ": " + what);
  }
  BULWARK_RETURN_IF_ERROR(r->Link());
  return r;
}

std::string Ring::Identity(int rank) {
  auto it = identities_.find(rank);
  if (it != identities_.end()) return it->second;
  if (store_ == nullptr) throw std::runtime_error("rank " + std::to_string(rank) + "'s ring address is not in the plan");
  return identities_[rank] = Bytes(store_->get("bulwark-ring/" + std::to_string(rank)));
}

int Ring::Fd(const std::string& peer, int channel) {
  auto it = links_.fds_.find({peer, channel});
  return it == links_.fds_.end() ? -1 : it->second;
}

Result<int> ring_wire::Dial(const std::string& self, const std::string& peer, int channel, double deadline) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_in a = Parse(peer);
  if (fd < 0) return Status::Unavailable(Errno("socket"));
  LargeBuffers(fd);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 && errno != EINPROGRESS) {
    ::close(fd);
    return Status::Unavailable(Errno(("connecting to ring peer " + peer).c_str()));
  }
  pollfd pfd{fd, POLLOUT, 0};
  int err = 0;
  socklen_t len = sizeof(err);
  if (::poll(&pfd, 1, MsLeft(deadline)) != 1 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
    ::close(fd);
    return Status::Unavailable("connecting to ring peer " + peer + " failed: " + std::strerror(err ? err : ETIMEDOUT));
  }
  NonBlocking(fd);
  Frame f;
  f.kind = kIdent;
  f.tag = channel;
  f.len = self.size();
  std::string out(reinterpret_cast<const char*>(&f), sizeof(f));
  out += self;
  size_t done = 0;
  Status st = WriteAll(fd, out.data(), out.size(), deadline, &done);
  if (!st.ok()) {
    ::close(fd);
    return st;
  }
  return fd;
}

Status Ring::AcceptUntil(const RingLinks::Key& want, bool watch_ring) {
  const double deadline = Deadline();
  // Forming, a rank hears its agent (a survivor of a spliced grow waits here
  // for a joiner that may have died: the agent's next generation ends it).
  bool hear_agent = !watch_ring && links_.interrupt_fd_ >= 0;
  while (links_.fds_.count(want) == 0) {
    // A receive waits on the ring's ABORTs too (AwaitPoint); forming the
    // ring does not, since its neighbours' links are what it is making.
    if (watch_ring) BULWARK_RETURN_IF_ERROR(AwaitPoint(links_.listen_fd_));
    pollfd ps[2] = {{links_.listen_fd_, POLLIN, 0}, {links_.interrupt_fd_, POLLIN, 0}};
    const int ready = ::poll(ps, hear_agent ? 2 : 1, watch_ring ? 0 : MsLeft(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (hear_agent && ps[1].revents != 0 && AgentEnded(ps[1].revents, &hear_agent)) {
      return Status::Unavailable("the agent ended this generation while the ring waited for " + want.first);
    }
    if (ready > 0 && ps[0].revents == 0) continue;  // the agent spoke of something else
    if (ready <= 0) {
      return Status::Unavailable("no link from ring peer " + want.first + " within " + std::to_string(timeout_s_) + " s");
    }
    const int fd = ::accept4(links_.listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;
    NonBlocking(fd);
    Frame f;
    std::string who;
    if (!ReadAll(fd, reinterpret_cast<char*>(&f), sizeof(f), std::min(deadline, Now() + 5)).ok() ||
        f.magic != Frame().magic || f.kind != kIdent || f.len > 256) {
      ::close(fd);
      continue;
    }
    who.resize(f.len);
    if (!ReadAll(fd, who.data(), who.size(), std::min(deadline, Now() + 5)).ok()) {
      ::close(fd);
      continue;
    }
    // A peer dials anew only when it gave the old link up.
    links_.Close({who, static_cast<int>(f.tag)});
    links_.Add({who, static_cast<int>(f.tag)}, fd);
  }
  return Status::OK();
}

// A store publishes an address only once its rank listens, so a refusal
// there means the rank is gone. A plan names a slot's address before its
// process listens (a rank starting anew in the slot), so a refusal is
// retried until the deadline, or until the agent ends the generation.
Result<int> Ring::DialNeighbour(const std::string& peer) {
  const double deadline = Deadline();
  bool hear_agent = links_.interrupt_fd_ >= 0;
  for (;;) {
    auto fd = Dial(links_.identity(), peer, kRingChannel, deadline);
    if (fd.ok() || store_ != nullptr || fd.status().message().find("refused") == std::string::npos) return fd;
    if (Now() + 0.02 >= deadline) return fd;
    pollfd pfd{links_.interrupt_fd_, POLLIN, 0};
    if (::poll(&pfd, hear_agent ? 1 : 0, 20) > 0 && AgentEnded(pfd.revents, &hear_agent)) {
      return Status::Unavailable("the agent ended this generation while the ring dialled " + peer);
    }
  }
}

// Both neighbour links up (kept, dialled, or accepted: the layout's tiers
// say which end dials), a HELLO of this generation sent on each, then each one's
// HELLO read: every rank sends before it waits, so no wait goes round the
// ring.
Status Ring::Link() {
  const std::set<std::string>& peers = peers_;
  std::vector<RingLinks::Key> stale;
  for (const auto& [k, fd] : links_.fds_) {
    if (k.second == kRingChannel && peers.count(k.first) == 0) stale.push_back(k);
  }
  for (const auto& k : stale) links_.Close(k);
  // The second attempt is only for the links the first found given up (a
  // kept link whose peer process is gone: under a plan, its slot's new
  // process has the same address). A link that passed has had its one
  // HELLO each way; a second would reach the peer as a stray frame.
  std::vector<std::string> todo(peers.begin(), peers.end());
  // Under a plan a neighbour's slot may change hands while this rank dials
  // it: a link made to the process the agent is still ending breaks at its
  // death, and the next attempt reaches its successor. So a planned ring
  // tries a few times, each only on the links that broke.
  const int attempts = store_ == nullptr ? 6 : 2;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    std::vector<std::string> redo;
    for (const std::string& p : todo) {
      if (Fd(p, kRingChannel) >= 0) continue;
      if (dials_.count(p) != 0) {
        auto fd = DialNeighbour(p);
        if (!fd.ok()) return Fail(fd.status());
        links_.Add({p, kRingChannel}, *fd);
      }
    }
    for (const std::string& p : todo) BULWARK_RETURN_IF_ERROR(AcceptUntil({p, kRingChannel}));
    Frame hello;
    hello.kind = kHello;
    hello.nonce = nonce_;
    for (const std::string& p : todo) {
      size_t done = 0;
      if (!WriteAll(Fd(p, kRingChannel), reinterpret_cast<char*>(&hello), sizeof(hello), Deadline(), &done).ok()) {
        redo.push_back(p);
      }
    }
    for (const std::string& p : todo) {
      if (std::find(redo.begin(), redo.end(), p) != redo.end()) continue;
      bool eof = false;
      Status st = ReadFrame(Fd(p, kRingChannel), /*tag=*/-1, nullptr, 0, &eof);
      if (!st.ok() && !eof) return Fail(st);
      if (!st.ok()) redo.push_back(p);
    }
    if (redo.empty()) {
      for (const std::string& p : peers) {
        const bool fresh = links_.fresh_.count(Fd(p, kRingChannel)) != 0;
        links_.kept_ += !fresh;
        links_.dialled_ += fresh && dials_.count(p) != 0;
        // Both ends made this link now, so both drop what they kept to the
        // peer point to point: it may lead to a process that is gone.
        if (fresh) links_.Close({p, kPointChannel});
      }
      return Status::OK();
    }
    // A kept link the peer had given up: it dials or accepts anew.
    for (const std::string& p : redo) links_.Close({p, kRingChannel});
    todo = redo;
  }
  return Fail(Status::Unavailable("ring links to " + std::to_string(peers_.size()) + " peers (" + pred_ + ", " + succ_ +
                                  " on its group's ring) could not be formed"));
}

// Reads frames from `fd` until this generation's frame: a HELLO when
// `tag` is -1, else the DATA frame numbered `tag`, whose `in_len` bytes go
// straight to `in`. Frames of other generations are skipped; an ABORT of
// this one fails. `eof`: the link closed (a kept link its peer gave up, or
// a dead peer).
Status Ring::ReadFrame(int fd, int64_t tag, char* in, size_t in_len, bool* eof) {
  const double deadline = Deadline();
  std::vector<char> skip;
  for (;;) {
    Frame f;
    Status st = ReadAll(fd, reinterpret_cast<char*>(&f), sizeof(f), deadline);
    if (!st.ok()) {
      *eof = st.message().find("timed out") == std::string::npos;  // closed or reset
      return st;
    }
    if (f.magic != Frame().magic) return Status::Unavailable("a ring link carried a malformed frame");
    const bool mine = f.nonce == nonce_ && ((tag < 0 && f.kind == kHello) || (tag >= 0 && f.kind == kData && f.tag == tag));
    if (mine && f.len != in_len) return Status::Unavailable("a ring frame has the wrong size");
    if (!mine) skip.resize(f.len);
    BULWARK_RETURN_IF_ERROR(ReadAll(fd, mine ? in : skip.data(), f.len, deadline));
    if (mine) return Status::OK();
    if (f.nonce != nonce_) continue;  // a failed generation's leftovers
    if (f.kind == kAbort) return Status::Unavailable("a ring peer's collective failed");
    return Status::Unavailable("a ring link carried frame " + std::to_string(f.tag) + " where " +
                               std::to_string(tag) + " was due");
  }
}

// Sends `out` as one DATA frame numbered `tag` to `to` while reading
// DATA frame `tag`, of `in_len` bytes, from `from` into `in` (either side
// may be -1), both at once, so two neighbours sending to each other never
// wait on each other's buffers. Bytes go from and to the tensors' memory.
Status Ring::Exchange(int to, const Pieces& out, int from, char* in, size_t in_len, int64_t tag) {
  const double deadline = Deadline();
  Frame head;
  head.kind = kData;
  head.nonce = nonce_;
  head.tag = tag;
  std::vector<iovec> iov = {{&head, sizeof(head)}};
  for (const auto& [ptr, len] : out) {
    if (len > 0) iov.push_back({const_cast<char*>(ptr), len});
    head.len += len;
  }
  const size_t total = to < 0 ? 0 : sizeof(head) + head.len;
  size_t sent = 0, at = 0;  // bytes sent; the iovec they have reached
  Frame f;
  std::vector<char> skip;
  char* payload = nullptr;
  size_t got = 0;  // of the frame being read, header included
  bool done = from < 0;
  auto fail = [&](Status st) {
    if (to >= 0 && sent > 0 && sent < total) links_.CloseFd(to);
    if (from >= 0 && got > 0) links_.CloseFd(from);
    return Fail(st);
  };
  bool hear_agent = links_.interrupt_fd_ >= 0;
  while (sent < total || !done) {
    pollfd p[3];
    int n = 0;
    if (sent < total) p[n++] = {to, POLLOUT, 0};
    if (!done) p[n++] = {from, POLLIN, 0};
    const int data = n;  // p[0, data): the links
    if (hear_agent) p[n++] = {links_.interrupt_fd_, POLLIN, 0};
    if (::poll(p, n, MsLeft(deadline)) == 0) return fail(Status::Unavailable("a ring collective timed out"));
    if (hear_agent && p[data].revents != 0 && AgentEnded(p[data].revents, &hear_agent)) {
      return fail(Status::Unavailable("the agent ended this generation inside a collective"));
    }
    if (sent < total && p[0].revents != 0) {
      msghdr m{};
      m.msg_iov = iov.data() + at;
      m.msg_iovlen = iov.size() - at;
      const ssize_t k = ::sendmsg(to, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k < 0 && errno != EAGAIN && errno != EINTR) return fail(Status::Unavailable(Errno("send to a ring neighbour")));
      for (size_t left = k > 0 ? static_cast<size_t>(k) : 0; left > 0;) {  // advance past what went
        const size_t step = std::min(left, iov[at].iov_len);
        iov[at].iov_base = static_cast<char*>(iov[at].iov_base) + step;
        iov[at].iov_len -= step;
        left -= step;
        sent += step;
        if (iov[at].iov_len == 0) ++at;
      }
    }
    if (done || p[data - 1].revents == 0) continue;
    char* dst = got < sizeof(f) ? reinterpret_cast<char*>(&f) + got : payload + (got - sizeof(f));
    const size_t want = got < sizeof(f) ? sizeof(f) - got : sizeof(f) + f.len - got;
    const ssize_t k = ::recv(from, dst, want, MSG_DONTWAIT);
    if (k == 0) return fail(Status::Unavailable("a ring neighbour closed its link"));
    if (k < 0 && errno != EAGAIN && errno != EINTR) return fail(Status::Unavailable(Errno("receive from a ring neighbour")));
    if (k < 0) continue;
    got += static_cast<size_t>(k);
    if (got == sizeof(f)) {  // the header is in: where does the payload go?
      if (f.magic != Frame().magic) return fail(Status::Unavailable("a ring link carried a malformed frame"));
      const bool mine = f.nonce == nonce_ && f.kind == kData && f.tag == tag;
      if (mine && f.len != in_len) return fail(Status::Unavailable("a ring frame has the wrong size"));
      if (!mine) skip.resize(f.len);
      payload = mine ? in : skip.data();
    }
    if (got < sizeof(f) || got < sizeof(f) + f.len) continue;
    got = 0;  // a whole frame
    if (f.nonce != nonce_) continue;  // a failed generation's leftovers
    if (f.kind == kAbort) return Fail(Status::Unavailable("a ring peer's collective failed"));
    if (f.kind != kData || f.tag != tag) return fail(Status::Unavailable("a ring link carried an unexpected frame"));
    done = true;
  }
  return Status::OK();
}

bool Ring::AgentEnded(short revents, bool* watch) {
  if (links_.interrupted_ && links_.interrupted_()) return true;
  if (revents & (POLLHUP | POLLERR)) *watch = false;
  return false;
}

// This generation is over for this rank: both neighbours are told, so a
// collective they are in (or enter) fails; a link with half a frame on it
// was closed instead (Exchange).
Status Ring::Fail(const Status& why) {
  if (!failed_ && world_ > 1) {
    failed_ = true;
    Frame abort;
    abort.kind = kAbort;
    abort.nonce = nonce_;
    for (const std::string& p : peers_) {
      const int fd = Fd(p, kRingChannel);
      if (fd < 0) continue;
      if (::send(fd, &abort, sizeof(abort), MSG_NOSIGNAL | MSG_DONTWAIT) != static_cast<ssize_t>(sizeof(abort))) {
        links_.Close({p, kRingChannel});
      }
    }
  }
  return Status::Unavailable(why.message());
}

Ring::~Ring() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (sender_.joinable()) sender_.join();
  (void)Fail(Status::OK());
}

}  // namespace bulwark::trainer
