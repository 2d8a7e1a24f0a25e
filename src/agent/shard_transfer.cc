#include "agent/shard_transfer.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace bulwark::agent {
namespace {

Status Errno(const std::string& what) { return Status::Unavailable(what + ": " + std::strerror(errno)); }

// A non-blocking connect's outcome as an errno (0: connected), ETIMEDOUT
// when nothing answered within `connect_ms`.
int AwaitConnect(int fd, int connect_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(connect_ms);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLOUT, 0};
    int ready = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return errno;
    if (ready == 0) return ETIMEDOUT;
    int err = 0;
    socklen_t n = sizeof err;
    return ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &n) == 0 ? err : errno;
  }
}

}  // namespace

void SetTimeouts(int fd, int seconds) {
  timeval tv{seconds, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

Result<int> TcpSocket() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  return fd;
}

// Non-blocking, so the wait for the handshake has its own deadline: a
// blocking connect ends only at the socket's send timeout (the transfer's),
// and a machine that died answers nothing, not even a refusal.
Status ConnectTcp(int fd, const std::string& host_port, int timeout_s, int connect_ms) {
  auto colon = host_port.rfind(':');
  if (colon == std::string::npos) return Status::InvalidArgument("shard server address '" + host_port + "' has no port");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::atoi(host_port.c_str() + colon + 1)));
  if (::inet_pton(AF_INET, host_port.substr(0, colon).c_str(), &a.sin_addr) != 1) {
    return Status::InvalidArgument("shard server address '" + host_port + "' is not an IPv4 host:port");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  int err = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 ? 0 : errno;
  if (err == EINPROGRESS) err = AwaitConnect(fd, connect_ms);
  if (err == ETIMEDOUT) {
    return Status::Unavailable("connecting to shard server " + host_port + ": no answer within " +
                               std::to_string(connect_ms) + " ms");
  }
  if (err != 0) {
    errno = err;
    return Errno("connecting to shard server " + host_port);
  }
  ::fcntl(fd, F_SETFL, flags);
  SetTimeouts(fd, timeout_s);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return Status::OK();
}

Result<int> DialTcp(const std::string& host_port, int timeout_s, int connect_ms) {
  auto fd = TcpSocket();
  if (!fd.ok()) return fd.status();
  Status st = ConnectTcp(*fd, host_port, timeout_s, connect_ms < 0 ? timeout_s * 1000 : connect_ms);
  if (!st.ok()) {
    ::close(*fd);
    return st;
  }
  return *fd;
}

Result<int> ListenTcp(const std::string& host, int* port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = 0;
  ::inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 16) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    Status st = Errno("listening for shard transfers on " + host);
    ::close(fd);
    return st;
  }
  *port = ntohs(a.sin_port);
  return fd;
}

Status SendAll(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return Errno("sending a shard");
    p += k;
    n -= static_cast<size_t>(k);
  }
  return Status::OK();
}

Status RecvAll(int fd, void* data, size_t n) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t k = ::recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k == 0) return Status::Unavailable("shard transfer cut short by the peer");
    if (k < 0) return Errno("receiving a shard");
    p += k;
    n -= static_cast<size_t>(k);
  }
  return Status::OK();
}

Result<std::string> RecvLine(int fd) {
  std::string line;
  char c = 0;
  while (line.size() < 512) {
    BULWARK_RETURN_IF_ERROR(RecvAll(fd, &c, 1));
    if (c == '\n') return line;
    line += c;
  }
  return Status::Corrupt("shard transfer header longer than 512 bytes");
}

}  // namespace bulwark::agent
