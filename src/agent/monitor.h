// Monitor: follows each rank's log as it grows. It picks out the trainer's
// JSON progress lines ({"event":"step"}, {"event":"done"}) and keeps the last
// lines for the signature table to classify a death.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

namespace bulwark::agent {

class LogFollower {
 public:
  // Follows `path` from its current end: what an earlier generation wrote
  // is not this process's story.
  explicit LogFollower(std::string path);

  // Reads what was appended since the last call.
  void Poll();
  // Feeds one line (Poll does this; tests call it directly).
  void Consume(const std::string& line);

  std::optional<int64_t> last_step() const { return last_step_; }
  std::optional<int64_t> done_step() const { return done_step_; }
  std::vector<std::string> tail() const { return {tail_.begin(), tail_.end()}; }

  // The trainer's `restore` event, once: which checkpoint it resumed from.
  struct Restore {
    int64_t step = 0, newest_step = 0;
    std::string source;
    double ms = 0;
  };
  std::optional<Restore> TakeRestore() {
    auto r = restore_;
    restore_.reset();
    return r;
  }

 private:
  std::string path_;
  uint64_t offset_ = 0;
  std::string partial_;
  std::deque<std::string> tail_;
  std::optional<int64_t> last_step_;
  std::optional<int64_t> done_step_;
  std::optional<Restore> restore_;
};

}  // namespace bulwark::agent
