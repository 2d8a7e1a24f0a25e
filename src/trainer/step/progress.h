// What the trainer tells a person or a script while it runs.
//
// Human mode: one live line on stderr (rewritten in place on a terminal,
// printed every few seconds otherwise) and a summary at the end. JSON mode:
// one object per line on stdout. Either way the last stdout line is the
// "done" object, the contract the supervisor reads.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace bulwark::trainer {

// The trainer's clock, and the milliseconds between two of its readings.
using TrainClock = std::chrono::steady_clock;
inline double Ms(TrainClock::time_point a, TrainClock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Wall-clock milliseconds since the epoch: what the agent and controller
// compare a step signal's time with (other machines' clocks, not this
// process's steady clock).
inline int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct StepReport {
  int64_t step = 0, total = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  double step_ms = 0, tokens_per_s = 0;
  // Where the step's time went: forward (with batch assembly), backward,
  // gradient all-reduce, optimizer (clip, update, parameter all-gather).
  double forward_ms = 0, backward_ms = 0, comm_ms = 0, optimizer_ms = 0;
  // Time this step spent waiting on the in-memory checkpoint and the CPU its
  // background copy took (negative: none taken), and the parameter checksum
  // after it (--step-checksum).
  double ckpt_block_ms = -1, ckpt_copy_cpu_ms = -1;
  std::string checksum;
};

class Progress {
 public:
  Progress(bool json, bool enabled, int64_t log_every);
  void Start(const nlohmann::json& info);  // parameters, world size, resume point
  void Step(const StepReport& r);
  void Eval(int64_t step, double val_loss);
  void Note(const std::string& line);
  void PoetDiagnostics(int64_t step, const nlohmann::json& diag);      // one-off messages: skipped checkpoints, saves
  void Done(int64_t step, double loss, const std::string& checksum, double seconds);
  static void Emit(const nlohmann::json& j);  // one JSON line on stdout, flushed

 private:
  void ClearLine();
  bool json_, enabled_, tty_;
  int64_t log_every_;
  double ema_ms_ = 0, last_val_ = -1;
  int64_t first_step_ = -1;
  std::chrono::steady_clock::time_point last_print_{};
  bool line_open_ = false;
};

}  // namespace bulwark::trainer
