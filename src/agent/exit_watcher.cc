#include "agent/exit_watcher.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <vector>

namespace bulwark::agent {
namespace {

int PidFd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

bool PidFdsWork() {
  const int fd = PidFd(::getpid());
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

}  // namespace

ExitWatcher::ExitWatcher(std::function<void()> wake) : wake_(std::move(wake)) {
  if (!PidFdsWork()) return;
  event_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (event_fd_ < 0) return;
  thread_ = std::thread([this] { Run(); });
}

ExitWatcher::~ExitWatcher() {
  if (event_fd_ < 0) return;
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  const uint64_t one = 1;
  (void)!::write(event_fd_, &one, sizeof one);
  thread_.join();
  for (const auto& [pid, fd] : fds_) ::close(fd);
  ::close(event_fd_);
}

void ExitWatcher::Watch(const std::set<pid_t>& pids) {
  if (event_fd_ < 0) return;
  {
    MutexLock lock(&mu_);
    if (pids == wanted_) return;
    wanted_ = pids;
    for (auto it = ended_.begin(); it != ended_.end();) it = pids.count(*it) ? std::next(it) : ended_.erase(it);
  }
  const uint64_t one = 1;
  (void)!::write(event_fd_, &one, sizeof one);
}

void ExitWatcher::Run() {
  std::vector<pollfd> polled;
  std::vector<pid_t> polled_pids;
  for (;;) {
    {
      MutexLock lock(&mu_);
      if (stop_) return;
      // Close what is no longer wanted or has ended; open what is new.
      for (auto it = fds_.begin(); it != fds_.end();) {
        if (wanted_.count(it->first) && !ended_.count(it->first)) {
          ++it;
          continue;
        }
        ::close(it->second);
        it = fds_.erase(it);
      }
      for (pid_t pid : wanted_) {
        if (fds_.count(pid) || ended_.count(pid)) continue;
        const int fd = PidFd(pid);
        if (fd >= 0) {
          fds_[pid] = fd;
        } else {
          ended_.insert(pid);  // already gone (ESRCH): the loop reaps it
        }
      }
    }
    polled.assign(1, pollfd{event_fd_, POLLIN, 0});
    polled_pids.assign(1, 0);
    for (const auto& [pid, fd] : fds_) {
      polled.push_back(pollfd{fd, POLLIN, 0});
      polled_pids.push_back(pid);
    }
    if (::poll(polled.data(), polled.size(), -1) < 0 && errno != EINTR) return;
    if (polled[0].revents & POLLIN) {
      uint64_t n = 0;
      (void)!::read(event_fd_, &n, sizeof n);
    }
    bool ended = false;
    for (size_t i = 1; i < polled.size(); ++i) {
      if (polled[i].revents == 0) continue;
      MutexLock lock(&mu_);
      ended_.insert(polled_pids[i]);
      ended = true;
    }
    if (ended) wake_();
  }
}

}  // namespace bulwark::agent
