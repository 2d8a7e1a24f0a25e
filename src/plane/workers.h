// Workers: a few threads that run the agents' calls into the plane
// (plane/service.cc). gRPC's callback threads also move every connection's
// bytes: one that waited on the plane's lock (a registration's fsync, a
// decision over every machine) starved handshakes and replies (at 4,000
// agents registrations timed out waiting for HTTP/2 SETTINGS). So the
// reactions only queue work here, and a call waiting for the plane waits in
// this queue, not in a thread of its own.
//
// Tasks run in the order posted, except that news goes first: a report
// that carries a rank's exit waits behind no one's heartbeat (issue 36: at
// 12,500 agents in 100 jobs the queue held reports about a second, and
// crashes in 3 of 10 jobs were decided 1.8-2.1 s after they happened, each
// the moment its report was taken). One agent's calls never overtake each
// other: an agent sends its next call only once the last is answered.
#pragma once

#include <deque>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "common/mutex.h"

namespace bulwark::plane {

class Workers {
 public:
  explicit Workers(int n) {
    for (int i = 0; i < n; ++i) threads_.emplace_back([this] { Loop(); });
  }
  ~Workers() {
    {
      MutexLock lock(&mu_);
      stop_ = true;
    }
    ready_.NotifyAll();
    for (std::thread& t : threads_) t.join();
  }
  Workers(const Workers&) = delete;
  Workers& operator=(const Workers&) = delete;

  // `news`: ahead of every task without news still waiting, behind earlier news.
  void Post(std::function<void()> task, bool news = false) {
    {
      MutexLock lock(&mu_);
      (news ? news_ : queue_).push_back(std::move(task));
    }
    ready_.NotifyOne();
  }

 private:
  void Loop() {
    for (;;) {
      std::function<void()> task;
      {
        MutexLock lock(&mu_);
        while (!stop_ && news_.empty() && queue_.empty()) ready_.Wait(&mu_);
        std::deque<std::function<void()>>& from = news_.empty() ? queue_ : news_;
        if (from.empty()) return;  // stopping, and everything posted has run
        task = std::move(from.front());
        from.pop_front();
      }
      task();
    }
  }

  Mutex mu_;
  CondVar ready_;
  std::deque<std::function<void()>> news_ GUARDED_BY(mu_);
  std::deque<std::function<void()>> queue_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace bulwark::plane
