#include "rank_client/shard_socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace bulwark::rank_client {
namespace {

Result<sockaddr_un> Address(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof a.sun_path) {
    return Status::InvalidArgument("socket path " + path + " is longer than " + std::to_string(sizeof a.sun_path - 1) +
                                   " bytes; use a shorter cluster directory");
  }
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  return a;
}

}  // namespace

Result<int> ConnectShardSocket(const std::string& path) {
  auto a = Address(path);
  if (!a.ok()) return a.status();
  int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (s < 0) return Status::IOError(std::string("socket: ") + std::strerror(errno));
  if (::connect(s, reinterpret_cast<sockaddr*>(&*a), sizeof *a) != 0) {
    int e = errno;
    ::close(s);
    return Status::Unavailable("connecting to the agent's shard socket " + path + ": " + std::strerror(e));
  }
  return s;
}

Result<int> ListenShardSocket(const std::string& path) {
  auto a = Address(path);
  if (!a.ok()) return a.status();
  ::unlink(path.c_str());  // a previous agent's socket on this machine
  int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (s < 0) return Status::IOError(std::string("socket: ") + std::strerror(errno));
  if (::bind(s, reinterpret_cast<sockaddr*>(&*a), sizeof *a) != 0 || ::listen(s, 16) != 0) {
    int e = errno;
    ::close(s);
    return Status::IOError("listening on " + path + ": " + std::strerror(e));
  }
  return s;
}

Status SendShardMessage(int sock, const std::string& text, int fd) {
  msghdr m{};
  iovec io{const_cast<char*>(text.data()), text.size()};
  m.msg_iov = &io;
  m.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  if (fd >= 0) {
    m.msg_control = control;
    m.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  if (::sendmsg(sock, &m, MSG_NOSIGNAL) < 0) {
    return Status::Unavailable(std::string("sending on the shard socket: ") + std::strerror(errno));
  }
  return Status::OK();
}

Result<std::string> RecvShardMessage(int sock, int* fd, int timeout_ms) {
  if (fd != nullptr) *fd = -1;
  pollfd p{sock, POLLIN, 0};
  int r = ::poll(&p, 1, timeout_ms);
  if (r == 0) return Status::Unavailable("no answer on the shard socket within " + std::to_string(timeout_ms) + " ms");
  if (r < 0) return Status::IOError(std::string("poll: ") + std::strerror(errno));
  char buf[4096];
  msghdr m{};
  iovec io{buf, sizeof buf};
  m.msg_iov = &io;
  m.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  ssize_t n = ::recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
  if (n <= 0) return Status::Unavailable("the shard socket was closed by its peer");
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      int got;
      std::memcpy(&got, CMSG_DATA(c), sizeof(int));
      if (fd != nullptr) *fd = got;
      else ::close(got);
    }
  }
  return std::string(buf, static_cast<size_t>(n));
}

std::vector<std::string> SplitWords(const std::string& line) {
  std::vector<std::string> out;
  std::string w;
  for (char c : line + " ") {
    if (c == ' ' || c == '\n') {
      if (!w.empty()) out.push_back(w);
      w.clear();
    } else {
      w += c;
    }
  }
  return out;
}

}  // namespace bulwark::rank_client
