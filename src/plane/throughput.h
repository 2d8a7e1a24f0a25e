// Throughput: the job's tokens per second, from the step signals of the rank
// that counts them (rank 0: bulwark-train reports the whole job's tokens per
// step on the rank link; a Python job may pass tokens= to bulwark.step).
//
// The rate is tokens over step time across the last kRuns signals, not
// over wall time: it is what the job does while it steps, the figure the
// trainer's own progress line prints. Time lost to faults shows in the
// ledger, and in rate() of the tokens counter, which stalls with the job.
#pragma once

#include <cstdint>
#include <deque>
#include <utility>

#include "plane/core.h"

namespace bulwark::plane {

class Throughput {
 public:
  // A signal that summed `tokens` tokens over `step_ms` of steps.
  void Add(int64_t tokens, double step_ms) {
    if (tokens <= 0 || step_ms <= 0) return;
    total_ += tokens;
    runs_.emplace_back(tokens, step_ms);
    if (runs_.size() > kRuns) runs_.pop_front();
  }
  // 0 until a signal carried tokens.
  double tokens_per_s() const {
    double tokens = 0, ms = 0;
    for (const auto& [t, m] : runs_) tokens += static_cast<double>(t), ms += m;
    return ms > 0 ? tokens * 1000.0 / ms : 0;
  }
  int64_t total() const { return total_; }
  bool known() const { return total_ > 0; }

 private:
  // About 10 s of reports at the agents' 2 Hz, each summing a run of steps.
  static constexpr size_t kRuns = 20;
  std::deque<std::pair<int64_t, double>> runs_;
  int64_t total_ = 0;
};

}  // namespace bulwark::plane
