// The fault trace: every fault of a run, in time order, drawn from the
// per-class rates (a Poisson process per class over the job's machine slots)
// or replayed from a script.
//
// A stream, not a list: the simulator and each baseline read the same trace
// by opening the same stream again, so memory stays independent of the
// simulated time (a year at 100k GPUs is ~20k faults; none is kept).
#pragma once

#include <cstdint>
#include <optional>

#include "sim/config.h"

namespace bulwark::sim {

struct Fault {
  double at = 0;  // seconds since the job's start
  FaultClass cls = FaultClass::kGpu;
  bool manual = false;  // a planned restart (cls unused)
  int slot = 0;         // the machine slot of the placement it hits
  int rack = -1;        // >= 0: a switch fault that takes this rack down (SimConfig::domains); cls unused
};

// SplitMix64: tiny, fast and the same on every platform and standard
// library, unlike std::exponential_distribution.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next();
  double Uniform();                  // [0, 1)
  double Exponential(double rate);   // mean 1 / rate
  int Below(int n);                  // [0, n)

 private:
  uint64_t state_;
};

class FaultStream {
 public:
  // Random faults from `c.rates` over `c.machines()` slots for `c.days`,
  // seeded by `c.seed`. Scripted configs yield nothing here (the simulator
  // injects scripted faults by step).
  explicit FaultStream(const SimConfig& c);
  // The racks a switch fault picks from: the job's machines and the
  // initial standbys, SimConfig::domains.rack_machines a rack; 0 when off.
  static int Racks(const SimConfig& c);
  // The next fault, or empty once past the horizon.
  std::optional<Fault> Next();

 private:
  struct Source {
    Rng rng{0};
    double rate = 0;  // per second, over the whole job
    double next = 0;
  };
  // The classes, then manual restarts, then switch faults (over racks).
  Source sources_[kNumFaultClasses + 2];
  double horizon_ = 0;
  int slots_ = 0;
  int racks_ = 0;
};

}  // namespace bulwark::sim
