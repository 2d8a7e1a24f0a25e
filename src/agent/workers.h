// Threads for work that outlasts a loop period (a stack capture, the
// stop-time diagnostics), joined as soon as they finish instead of at the
// agent's exit: an agent that traces a hung job every few minutes for a
// month would otherwise hold thousands of finished threads.
#pragma once

#include <atomic>
#include <functional>
#include <list>
#include <memory>
#include <thread>

namespace bulwark::agent {

class Workers {
 public:
  Workers() = default;
  Workers(const Workers&) = delete;
  Workers& operator=(const Workers&) = delete;
  ~Workers() { JoinAll(); }

  // Runs `work` on a thread of its own.
  void Start(std::function<void()> work) {
    auto done = std::make_shared<std::atomic<bool>>(false);
    running_.push_back({std::thread([work = std::move(work), done] {
                          work();
                          done->store(true);
                        }),
                        done});
  }
  // Joins the threads whose work has ended; the others keep running.
  void Reap() {
    for (auto it = running_.begin(); it != running_.end();) {
      if (!it->done->load()) {
        ++it;
        continue;
      }
      it->thread.join();
      it = running_.erase(it);
    }
  }
  void JoinAll() {
    for (Worker& w : running_) w.thread.join();
    running_.clear();
  }
  size_t running() const { return running_.size(); }

 private:
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::list<Worker> running_;  // touched by the owning thread only
};

}  // namespace bulwark::agent
