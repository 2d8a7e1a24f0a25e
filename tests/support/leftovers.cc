#include "support/leftovers.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

namespace bulwark::testing {
namespace {

// The watcher, in bash so that it runs nothing of the test's (the fork
// comes from a process that may hold threads and locks). It blocks on fd 3
// until EOF: the write end is held by the test alone and closed only when
// its process ends, however it ends. Then it kills every process whose
// environment carries the tag, again until none is left (one may have
// been mid-fork). Ranks die with their agent (PR_SET_PDEATHSIG).
constexpr const char kWatcher[] = R"(
tag="$1"
read -r -u 3 _ || true
for round in 1 2 3 4 5 6 7 8 9 10; do
  found=0
  for dir in /proc/[0-9]*; do
    mapfile -d '' -t vars < "$dir/environ" 2>/dev/null || continue
    for v in "${vars[@]}"; do
      if [[ $v == "$tag" ]]; then kill -KILL "${dir#/proc/}" 2>/dev/null && found=1; break; fi
    done
  done
  (( found )) || exit 0
  sleep 0.2
done
)";

std::string StartWatcher() {
  const auto now = std::chrono::steady_clock::now().time_since_epoch();
  const std::string tag = std::to_string(::getpid()) + "." +
                          std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count());
  int fds[2];
  // Without a pipe there is no watcher; the tag alone changes nothing.
  if (::pipe2(fds, O_CLOEXEC) != 0) return tag;
  // Built before fork: after it, only async-signal-safe calls.
  std::string script = kWatcher, bash = "/bin/bash", c = "-c", name = "bulwark-test-leftovers";
  std::string tagged = std::string(kOwnerVariable) + "=" + tag, path = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";
  char* argv[] = {bash.data(), c.data(), script.data(), name.data(), tagged.data(), nullptr};
  char* envp[] = {path.data(), nullptr};  // the watcher itself carries no tag
  const pid_t child = ::fork();
  if (child == 0) {
    // Out of the test's session and tree (reparented to init), so that
    // ctest's kill of the tree does not take the watcher too.
    ::setsid();
    if (::fork() != 0) ::_exit(0);
    if (fds[0] == 3) ::fcntl(3, F_SETFD, 0);
    else ::dup2(fds[0], 3);  // dup2 clears close-on-exec
    // Nothing of the test's stays open in it: ctest reads the test's
    // output until every holder of its pipe is gone.
    const int null = ::open("/dev/null", O_RDWR);
    for (int fd = 0; fd < 3; ++fd) ::dup2(null, fd);
    ::close_range(4, ~0U, 0);
    ::execve(argv[0], argv, envp);
    ::_exit(127);
  }
  ::close(fds[0]);
  if (child > 0) ::waitpid(child, nullptr, 0);
  // fds[1] stays open, close-on-exec, for as long as this process lives.
  return tag;
}

}  // namespace

const std::string& LeftoversTag() {
  static const std::string tag = StartWatcher();
  return tag;
}

}  // namespace bulwark::testing
