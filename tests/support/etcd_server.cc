#include "support/etcd_server.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "plane/etcd_client.h"

namespace bulwark::testing {

namespace {

// Process execs a path, not a name: Debian's etcd-server installs here.
std::string EtcdBinary() {
  const char* env = std::getenv("BULWARK_ETCD");
  return env && *env ? env : "/usr/bin/etcd";
}

}  // namespace

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

std::unique_ptr<EtcdServer> EtcdServer::Start(std::string* why) {
  std::unique_ptr<EtcdServer> s(new EtcdServer());
  s->dir_ = MakeTempDir();
  s->endpoint_ = "127.0.0.1:" + std::to_string(FreePort());
  s->peer_url_ = "http://127.0.0.1:" + std::to_string(FreePort());
  if (!s->Launch(why)) return nullptr;
  return s;
}

EtcdServer::~EtcdServer() { Thaw(); }

bool EtcdServer::Launch(std::string* why) {
  const std::string client_url = "http://" + endpoint_;
  process_ = std::make_unique<Process>(std::vector<std::string>{
      EtcdBinary(), "--name", "t", "--data-dir", dir_ + "/data", "--listen-client-urls", client_url,
      "--advertise-client-urls", client_url, "--listen-peer-urls", peer_url_, "--initial-advertise-peer-urls",
      peer_url_, "--initial-cluster", "t=" + peer_url_, "--log-level", "error"});
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  Status last = Status::Unavailable("not tried");
  while (std::chrono::steady_clock::now() < until) {
    Result<std::unique_ptr<plane::EtcdClient>> c =
        plane::EtcdClient::Connect(endpoint_, std::chrono::milliseconds(500));
    if (c.ok()) return true;
    last = c.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  *why = "etcd at " + endpoint_ + " did not answer within 20 s: " + last.message() +
         " (is etcd-server installed? scripts/install-deps.sh)";
  return false;
}

void EtcdServer::Kill() {
  if (process_) ::kill(process_->pid(), SIGKILL);
  process_.reset();
}

bool EtcdServer::Restart(std::string* why) {
  Kill();
  return Launch(why);
}

void EtcdServer::Freeze() {
  if (process_) ::kill(process_->pid(), SIGSTOP);
}

void EtcdServer::Thaw() {
  if (process_) ::kill(process_->pid(), SIGCONT);
}

}  // namespace bulwark::testing
