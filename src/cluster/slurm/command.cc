#include "cluster/slurm/command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "cluster/local/local_cluster.h"

namespace bulwark::cluster {

std::string CommandResult::Describe(const std::vector<std::string>& argv) const {
  std::string cmd;
  for (size_t i = 0; i < argv.size() && i < 4; ++i) cmd += (i ? " " : "") + argv[i];
  if (argv.size() > 4) cmd += " ...";
  std::string why = timed_out ? "timed out" : exit_code < 0 ? "did not run or was killed" : "exit " + std::to_string(exit_code);
  std::string text = err.empty() ? out : err;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  if (text.size() > 300) text = text.substr(0, 300) + "...";
  return cmd + ": " + why + (text.empty() ? "" : ": " + text);
}

CommandResult SystemRunner::Run(const std::vector<std::string>& argv, double timeout_s) {
  CommandResult r;
  if (argv.empty()) {
    r.err = "empty command";
    return r;
  }
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
    r.err = std::string("pipe: ") + std::strerror(errno);
    return r;
  }
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    r.err = std::string("pipe: ") + std::strerror(errno);
    return r;
  }
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::execvp(cargv[0], cargv.data());
    std::fprintf(stderr, "cannot run %s: %s\n", cargv[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (pid < 0) {
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    r.err = std::string("fork: ") + std::strerror(errno);
    return r;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  while (open_fds > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      r.timed_out = true;
      break;
    }
    const int n = ::poll(fds, 2, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      const ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        (i == 0 ? r.out : r.err).append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (const pollfd& f : fds) {
    if (f.fd >= 0) ::close(f.fd);
  }
  if (r.timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!r.timed_out && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  return r;
}

Status SpawnCommandDetached(const std::vector<std::string>& argv, const std::string& log) {
  if (argv.empty()) return Status::InvalidArgument("spawn: empty command");
  std::vector<std::string> resolved = argv;
  if (argv[0].find('/') == std::string::npos) {
    const char* path = std::getenv("PATH");
    std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
    resolved[0].clear();
    for (size_t b = 0; b <= dirs.size();) {
      size_t e = dirs.find(':', b);
      if (e == std::string::npos) e = dirs.size();
      const std::string candidate = (e > b ? dirs.substr(b, e - b) : ".") + "/" + argv[0];
      if (::access(candidate.c_str(), X_OK) == 0) {
        resolved[0] = candidate;
        break;
      }
      b = e + 1;
    }
    if (resolved[0].empty()) {
      return Status::NotFound(argv[0] + " is not in PATH; install Slurm's client tools (slurm-client) on this host");
    }
  }
  return SpawnDetached(resolved, log);
}

}  // namespace bulwark::cluster
