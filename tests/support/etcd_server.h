// A real etcd (Debian's etcd-server) for the controller's HA tests and
// bench: one member in a fresh directory on ports the kernel picked free,
// with the means to kill, restart, freeze and thaw it.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "support/process.h"

namespace bulwark::testing {

class EtcdServer {
 public:
  // Starts the member and waits (20 s at most) until it answers; on failure
  // returns null and says why in `*why`.
  static std::unique_ptr<EtcdServer> Start(std::string* why);
  ~EtcdServer();

  // host:port for --etcd.
  const std::string& endpoint() const { return endpoint_; }
  // SIGKILL, as a lost machine; Restart brings it back on the same
  // directory and ports, and waits until it answers.
  void Kill();
  bool Restart(std::string* why);
  // SIGSTOP / SIGCONT: a member that accepts connections and answers
  // nothing, as one cut off by a partition.
  void Freeze();
  void Thaw();
  // Its pid, for the caller's pid files.
  pid_t pid() const { return process_ ? process_->pid() : -1; }

 private:
  EtcdServer() = default;
  bool Launch(std::string* why);

  std::string dir_, endpoint_, peer_url_;
  std::unique_ptr<Process> process_;
};

// A port that was free a moment ago (bound to 0 and released).
int FreePort();

}  // namespace bulwark::testing
