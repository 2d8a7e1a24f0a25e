// Monitor: follows each rank's log as it grows. It picks out the trainer's
// JSON progress lines ({"event":"step"}, {"event":"done"}), or with the
// job's progress pattern the lines that match it (any program's output),
// and keeps the last lines for the signature table to classify a death.
#pragma once

#include <cstdint>
#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/progress_pattern.h"

namespace bulwark::agent {

class LogFollower {
 public:
  // Follows `path` from its current end: what an earlier generation wrote
  // is not this process's story.
  // `progress`: the job's pattern (progress: {regex} in the job file), or
  // nullptr for bulwark-train's JSON lines only.
  explicit LogFollower(std::string path, std::shared_ptr<const ProgressPattern> progress = nullptr);

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
  // The lines the progress pattern matched since the last call, with when
  // they were read: the agent turns them into step signals.
  struct Progress {
    ProgressMatch match;
    std::chrono::system_clock::time_point seen;
  };
  std::vector<Progress> TakeProgress() {
    std::vector<Progress> out;
    out.swap(progress_);
    return out;
  }

  std::optional<Restore> TakeRestore() {
    auto r = restore_;
    restore_.reset();
    return r;
  }

 private:
  std::string path_;
  std::shared_ptr<const ProgressPattern> pattern_;
  std::vector<Progress> progress_;
  uint64_t offset_ = 0;
  std::string partial_;
  std::deque<std::string> tail_;
  std::optional<int64_t> last_step_;
  std::optional<int64_t> done_step_;
  std::optional<Restore> restore_;
};

}  // namespace bulwark::agent
