// Deterministic data order for data-parallel training.
//
// The token stream is cut into samples of T+1 tokens (inputs and shifted
// targets). Each epoch visits every sample once in an order drawn from
// (seed, epoch). A global cursor counts samples consumed by all ranks
// together; step s of a world of W ranks with B sequences each reads global
// positions [cursor, cursor + W*B), rank r taking [cursor + r*B, cursor +
// (r+1)*B). So the data position is one integer, the same on every rank, and
// 2 ranks of batch B read exactly what 1 rank of batch 2B reads.
#pragma once

#include <cstdint>
#include <vector>

namespace bulwark::trainer {

class Sampler {
 public:
  Sampler(uint64_t num_tokens, int context, uint64_t seed);
  uint64_t num_samples() const { return num_samples_; }
  // Start offset in the token stream of the sample at global position `pos`.
  uint64_t SampleStart(uint64_t pos);

 private:
  uint64_t num_samples_;
  int context_;
  uint64_t seed_;
  uint64_t epoch_ = UINT64_MAX;  // epoch of the cached order
  std::vector<uint32_t> order_;
};

// splitmix64: a tiny, well-mixed generator whose sequence is fixed forever,
// unlike std:: distributions, whose output may change between libraries.
inline uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace bulwark::trainer
