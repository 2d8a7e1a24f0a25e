// Silent data corruption, emulated: the trainer's documented test hook.
//
// A machine with a bad ALU or HBM cell returns a wrong matmul result now
// and then, and says nothing. Sdc::Corrupt does that to a gradient buffer
// (the output of the backward matmuls): in "nan" mode one element becomes
// NaN, in "drift" mode one element is scaled by (1 + 1e-3). It fires with
// probability `rate` per call, from a fixed-seed generator, and never logs.
//
// Under an agent the fault belongs to the machine: its emulated hardware
// (cluster/local/emulated_hardware.h) holds it in a file named by
// BULWARK_SDC_FILE, which every computing process on the machine reads,
// and reads again when it changes (SdcFile), so a fault injected into a
// running machine reaches its running ranks.
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
  // From BULWARK_SDC, when set and valid; else from BULWARK_SDC_FILE.
  static std::optional<Sdc> FromEnv();

  // Corrupts one element of `t` (a flat float tensor) with probability rate.
  void Corrupt(torch::Tensor& t);
  const std::string& mode() const { return mode_; }

 private:
  std::string mode_;
  double rate_ = 1.0;
  std::mt19937_64 rng_{0x5dc};
};

// The machine's emulated matmul corruption (BULWARK_SDC_FILE), polled once
// a step: one stat(2), and a read only when the file changed.
class SdcFile {
 public:
  // nullopt when BULWARK_SDC_FILE is not set. The file as it is now is
  // Sdc::FromEnv's to read; Poll reports what changes after.
  static std::optional<SdcFile> FromEnv();
  // Sets `sdc` from the file ("ok", absent or unreadable: none) when it
  // changed since the last call (or since FromEnv).
  void Poll(std::optional<Sdc>& sdc);

 private:
  int64_t Stamp() const;  // the file's mtime in ns; -2: absent
  std::string path_;
  int64_t seen_ns_ = -2;
};

}  // namespace bulwark::trainer
