#include "agent/tracer.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <vector>

#include "agent/stack_unwind.h"

namespace bulwark::agent {
namespace {

// Forks; the child runs `child_main` with stdout on a pipe and must _exit.
// Returns what it wrote, killing it once `budget` passes (`what` names it
// in that error).
Result<std::string> RunChild(const std::function<void()>& child_main, const std::string& what,
                             std::chrono::milliseconds budget, int* exit_code) {
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
    child_main();
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
  if (timed_out) return Status::Unavailable(what + " took longer than " + std::to_string(budget.count()) + " ms");
  return text;
}

void WriteAll(int fd, const std::string& s) {
  for (size_t done = 0; done < s.size();) {
    const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n <= 0 && errno != EINTR) return;
    if (n > 0) done += static_cast<size_t>(n);
  }
}

}  // namespace

const char* StackToolName(StackTool tool) {
  switch (tool) {
    case StackTool::kLibdw: return "libdw";
    case StackTool::kEuStack: return "eu-stack";
    case StackTool::kGdb: return "gdb";
  }
  return "?";
}

Result<std::string> RunCaptured(const std::vector<std::string>& argv, std::chrono::milliseconds budget, int* exit_code,
                                bool keep_stderr) {
  return RunChild(
      [&] {
        if (keep_stderr) {
          ::dup2(1, 2);
        } else if (int devnull = ::open("/dev/null", O_WRONLY); devnull >= 0) {
          ::dup2(devnull, 2);
        }
        std::vector<char*> args;
        for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
        args.push_back(nullptr);
        ::execvp(args[0], args.data());
      },
      argv[0], budget, exit_code);
}

Result<CapturedStack> CaptureStacksWith(StackTool tool, pid_t pid, std::chrono::milliseconds budget) {
  const auto t0 = std::chrono::steady_clock::now();
  int code = 0;
  Result<std::string> text = Status::Internal("no tool");
  switch (tool) {
    case StackTool::kLibdw:
      // In a child: the ptrace attach of a process that never stops (state
      // D) blocks, and only a kill ends it. The child writes the stacks, or
      // the error, and exits 0 or 1.
      text = RunChild(
          [pid] {
            Result<std::string> r = UnwindAllThreads(pid);
            WriteAll(1, r.ok() ? *r : r.status().message());
            ::_exit(r.ok() ? 0 : 1);
          },
          "libdw", budget, &code);
      if (text.ok() && code != 0) text = Status::Unavailable(code == 1 ? *text : "exit " + std::to_string(code));
      break;
    case StackTool::kEuStack:
      text = RunCaptured({"eu-stack", "-p", std::to_string(pid)}, budget, &code);
      if (text.ok() && code != 0) text = Status::Unavailable("exit " + std::to_string(code));
      break;
    case StackTool::kGdb:
      text = RunCaptured({"gdb", "-p", std::to_string(pid), "-batch", "-nx", "-ex", "thread apply all bt"}, budget,
                         &code);
      // gdb exits 0 even when it could not attach; a frame says it did.
      if (text.ok() && text->find("#0") == std::string::npos) text = Status::Unavailable("exit " + std::to_string(code));
      break;
  }
  if (!text.ok()) return text.status();
  if (tool != StackTool::kGdb && text->find("TID ") == std::string::npos) return Status::Unavailable("no thread");
  return CapturedStack{*text, StackToolName(tool),
                       std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count()};
}

Result<CapturedStack> CaptureStacks(pid_t pid, std::chrono::milliseconds budget) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string why;
  for (StackTool tool : {StackTool::kLibdw, StackTool::kEuStack, StackTool::kGdb}) {
    const auto left = budget - std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
    if (left.count() <= 100) break;
    Result<CapturedStack> st = CaptureStacksWith(tool, pid, left);
    if (st.ok()) {
      st->ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      return st;
    }
    why += std::string(why.empty() ? "" : "; ") + StackToolName(tool) + ": " + st.status().message();
  }
  return Status::Unavailable("no stack of process " + std::to_string(pid) + " (" + why + ")");
}

}  // namespace bulwark::agent
