// Silent data corruption, emulated: the trainer's documented test hook.
//
// A machine with a bad ALU or HBM cell returns a wrong matmul result now
// and then, and says nothing. Sdc::Corrupt does that to a gradient buffer
// (the output of the backward matmuls): in "nan" mode one element becomes
// NaN, in "drift" mode one element is scaled by (1 + 1e-3). It fires with
// probability `rate` per call, from a fixed-seed generator, and never logs.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <random>
#include <string>

namespace bulwark::trainer {

class Sdc {
 public:
  // "nan", "drift", "nan:0.5", "drift:0.01"; nullopt for anything else (and "").
  static std::optional<Sdc> Parse(const std::string& spec);
  // From BULWARK_SDC, when set and valid.
  static std::optional<Sdc> FromEnv();

  // Corrupts one element of `t` (a flat float tensor) with probability rate.
  void Corrupt(torch::Tensor& t);
  const std::string& mode() const { return mode_; }

 private:
  std::string mode_;
  double rate_ = 1.0;
  std::mt19937_64 rng_{0x5dc};
};

}  // namespace bulwark::trainer
