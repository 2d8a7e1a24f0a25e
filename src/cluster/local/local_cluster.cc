#include "cluster/local/local_cluster.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>

#include "common/files.h"

namespace bulwark::cluster {

std::vector<std::string> MachineIds(int total) {
  std::vector<std::string> ids;
  for (int i = 1; i <= total; ++i) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "m%02d", i);
    ids.push_back(buf);
  }
  return ids;
}

Status SpawnDetached(const std::vector<std::string>& argv, const std::string& log) {
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IOError("log " + log + ": " + std::strerror(errno));
  const pid_t child = ::fork();
  if (child < 0) {
    ::close(fd);
    return Status::IOError(std::string("fork: ") + std::strerror(errno));
  }
  if (child == 0) {
    // Double fork: the daemon is reparented to init and never becomes our zombie.
    ::setsid();
    if (::fork() != 0) ::_exit(0);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::execv(cargv[0], cargv.data());
    ::_exit(127);
  }
  ::close(fd);
  ::waitpid(child, nullptr, 0);
  return Status::OK();
}

bool Running(pid_t pid) {
  if (pid <= 0 || ::kill(pid, 0) != 0) return false;
  // A process that has exited stays until its parent reaps it, and the
  // detached processes of `bulwark up` have init for a parent: this host's
  // reaped them 1.9 s after they exited, which each `bulwark down` waited
  // out twice (agents, then the controller). Exited is gone.
  const char state = ProcessState(pid);  // 0 without /proc: as kill(0) said
  return state != 'Z' && state != 'X';
}

Result<pid_t> LivePid(const std::string& pid_file) {
  Result<std::string> text = ReadFile(pid_file);
  if (!text.ok()) return Status::NotFound("no pid file " + pid_file);
  const pid_t pid = static_cast<pid_t>(std::atol(text->c_str()));
  if (!Running(pid)) return Status::NotFound("process in " + pid_file + " is not running");
  return pid;
}

std::map<pid_t, std::vector<pid_t>> ChildrenByParent() {
  std::map<pid_t, std::vector<pid_t>> children;
  for (const std::string& name : ListDir("/proc")) {
    const pid_t pid = static_cast<pid_t>(std::atol(name.c_str()));
    if (pid <= 0) continue;
    Result<std::string> stat = ReadFile("/proc/" + name + "/stat");
    if (!stat.ok()) continue;  // gone meanwhile
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    const size_t close = stat->rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    long ppid = 0;
    if (std::sscanf(stat->c_str() + close + 1, " %c %ld", &state, &ppid) == 2) children[static_cast<pid_t>(ppid)].push_back(pid);
  }
  return children;
}

std::vector<pid_t> ProcessTree(pid_t root, const std::map<pid_t, std::vector<pid_t>>& children) {
  std::vector<pid_t> tree = {root};
  for (size_t i = 0; i < tree.size(); ++i) {
    auto it = children.find(tree[i]);
    if (it == children.end()) continue;
    for (pid_t c : it->second) tree.push_back(c);
  }
  return tree;
}

std::vector<pid_t> ProcessTree(pid_t root) { return ProcessTree(root, ChildrenByParent()); }

Result<int> FreezeMachine(const std::string& agent_pid_file, bool freeze) {
  Result<pid_t> agent = LivePid(agent_pid_file);
  if (!agent.ok()) return agent.status();
  std::vector<pid_t> tree = ProcessTree(*agent);
  if (!freeze) std::reverse(tree.begin(), tree.end());
  int n = 0;
  for (pid_t p : tree) n += ::kill(p, freeze ? SIGSTOP : SIGCONT) == 0;
  return n;
}

Status Terminate(const std::vector<pid_t>& pids, int grace_ms) {
  for (pid_t pid : pids) ::kill(pid, SIGTERM);
  auto alive = [&] {
    int n = 0;
    for (pid_t pid : pids) {
      ::waitpid(pid, nullptr, WNOHANG);  // in case it is our own child (tests)
      n += Running(pid);
    }
    return n;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms);
  while (alive() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (pid_t pid : pids) ::kill(pid, SIGKILL);
  return Status::OK();
}

}  // namespace bulwark::cluster
