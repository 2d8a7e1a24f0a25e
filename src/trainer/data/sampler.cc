#include "trainer/data/sampler.h"

namespace bulwark::trainer {

Sampler::Sampler(uint64_t num_tokens, int context, uint64_t seed)
    : num_samples_(num_tokens > 1 ? (num_tokens - 1) / context : 0), context_(context), seed_(seed) {}

uint64_t Sampler::SampleStart(uint64_t pos) {
  uint64_t epoch = pos / num_samples_;
  if (epoch != epoch_) {
    order_.resize(num_samples_);
    for (uint64_t i = 0; i < num_samples_; ++i) order_[i] = static_cast<uint32_t>(i);
    uint64_t state = seed_ * 0x100000001B3ull + epoch;
    for (uint64_t i = num_samples_ - 1; i > 0; --i) {  // Fisher-Yates
      uint64_t j = SplitMix64(state) % (i + 1);
      std::swap(order_[i], order_[j]);
    }
    epoch_ = epoch;
  }
  return static_cast<uint64_t>(order_[pos % num_samples_]) * context_;
}

}  // namespace bulwark::trainer
