#include "agent/tracer.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace bulwark::agent {

Result<std::string> RunCaptured(const std::vector<std::string>& argv, std::chrono::milliseconds budget, int* exit_code) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return Status::IOError(std::string("pipe: ") + std::strerror(errno));
  pid_t child = ::fork();
  if (child < 0) {
    ::close(out[0]);
    ::close(out[1]);
    return Status::IOError(std::string("fork: ") + std::strerror(errno));
  }
  if (child == 0) {
    ::dup2(out[1], 1);
    int devnull = ::open("/dev/null", O_WRONLY);
    if (devnull >= 0) ::dup2(devnull, 2);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  ::close(out[1]);
  std::string text;
  const auto end = std::chrono::steady_clock::now() + budget;
  bool timed_out = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{out[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[8192];
    ssize_t n = ::read(out[0], buf, sizeof buf);
    if (n <= 0) break;
    text.append(buf, n);
  }
  ::close(out[0]);
  if (timed_out) ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (timed_out) return Status::Unavailable(argv[0] + " took longer than " + std::to_string(budget.count()) + " ms");
  return text;
}

Result<CapturedStack> CaptureStacks(pid_t pid, std::chrono::milliseconds budget) {
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(); };
  int code = 0;
  Result<std::string> eu = RunCaptured({"eu-stack", "-p", std::to_string(pid)}, budget, &code);
  if (eu.ok() && code == 0 && eu->find("TID ") != std::string::npos) return CapturedStack{*eu, "eu-stack", elapsed()};
  std::string why = "eu-stack: " + (eu.ok() ? "exit " + std::to_string(code) : eu.status().message());
  const auto left = budget - std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  if (left.count() > 100) {
    Result<std::string> gdb = RunCaptured({"gdb", "-p", std::to_string(pid), "-batch", "-nx", "-ex", "thread apply all bt"},
                                          left, &code);
    if (gdb.ok() && gdb->find("#0") != std::string::npos) return CapturedStack{*gdb, "gdb", elapsed()};
    why += "; gdb: " + (gdb.ok() ? "exit " + std::to_string(code) : gdb.status().message());
  }
  return Status::Unavailable("no stack of process " + std::to_string(pid) + " (" + why + ")");
}

}  // namespace bulwark::agent
