// A real etcd (Debian's etcd-server) for the controller's HA tests and
// bench: one member or a cluster of several on this host, each in a fresh
// directory on ports the kernel picked free, with the means to kill,
// restart, freeze and thaw them.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "support/process.h"

namespace bulwark::testing {

class EtcdServer {
 public:
  // Starts `members` members as one cluster and waits (20 s at most) until
  // every one answers; on failure returns null and says why in `*why`.
  // `host`: the address members listen on (a bridge's, for controllers in
  // network namespaces).
  static std::unique_ptr<EtcdServer> Start(std::string* why, int members = 1, const std::string& host = "127.0.0.1");
  ~EtcdServer();

  // Every member's host:port, comma-separated, for --etcd.
  std::string endpoint() const;
  std::string member_endpoint(int i) const { return members_[i].client; }
  int size() const { return static_cast<int>(members_.size()); }

  // The whole cluster (every member) or member `i`: SIGKILL, as a lost
  // machine; Restart brings it back on the same directory and ports and
  // waits until it answers.
  void Kill();
  void KillMember(int i);
  bool RestartMember(int i, std::string* why);
  bool Restart(std::string* why);
  // SIGSTOP / SIGCONT: members that accept connections and answer nothing,
  // as ones cut off by a partition.
  void Freeze();
  void Thaw();
  pid_t pid(int i = 0) const { return members_[i].process ? members_[i].process->pid() : -1; }

 private:
  struct Member {
    std::string name, dir, client, peer_url;
    std::unique_ptr<Process> process;
  };
  EtcdServer() = default;
  void Launch(Member& m, bool existing);
  bool WaitAnswers(const Member& m, std::string* why) const;

  std::string initial_cluster_;
  std::string root_;  // the members' data directories, removed with the server
  std::vector<Member> members_;
};

// A port that was free a moment ago (bound to 0 and released).
int FreePort();

}  // namespace bulwark::testing
