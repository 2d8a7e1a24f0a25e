// The gaps between an agent's consecutive reports as the controller heard
// them, fleet-wide, over the last few seconds: the liveness lease is learned
// from them (issue 36; liveness_detector.h). When the controller's own
// intake lags (a host whose other load starves it, a backlog of commands to
// write), every agent's gaps widen together, and a lease of a fixed 2 s
// evicted healthy machines whose reports were on their way; a lease of twice
// the gaps' 99th percentile widens with them. A histogram of 100 ms buckets
// per second, five seconds kept: O(1) to add, O(buckets) to read. Not
// thread-safe (its owner's lock).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "controller/time.h"

namespace bulwark::controller {

class ReportGaps {
 public:
  // `count` gaps of `gap` heard at `now` (the simulator's modelled reports
  // come many at once).
  void Add(Time now, Duration gap, int64_t count = 1) {
    Epoch& e = EpochAt(now);
    const int64_t b = std::min<int64_t>(kBuckets - 1, std::max<int64_t>(0, gap.count() / kBucketMs));
    e.counts[static_cast<size_t>(b)] += count;
    e.total += count;
  }
  // The gap that `q` of those added in the last kEpochs seconds were at most
  // (the top of its bucket); zero when fewer than `min_samples` were added.
  Duration Quantile(Time now, double q, int64_t min_samples) const {
    const int64_t second = ToMs(now) / 1000;
    std::array<int64_t, kBuckets> sum{};
    int64_t total = 0;
    for (const Epoch& e : epochs_) {
      if (e.second < 0 || second - e.second >= kEpochs) continue;
      for (size_t b = 0; b < sum.size(); ++b) sum[b] += e.counts[b];
      total += e.total;
    }
    if (total < min_samples || total == 0) return Duration(0);
    const double want = q * static_cast<double>(total);
    int64_t seen = 0;
    for (size_t b = 0; b < sum.size(); ++b) {
      seen += sum[b];
      if (static_cast<double>(seen) >= want) return Duration((static_cast<int64_t>(b) + 1) * kBucketMs);
    }
    return Duration(kBuckets * kBucketMs);
  }

 private:
  static constexpr int64_t kBucketMs = 100;
  static constexpr size_t kBuckets = 100;  // gaps of 10 s and more share the last
  static constexpr int64_t kEpochs = 5;
  struct Epoch {
    int64_t second = -1;
    int64_t total = 0;
    std::array<int64_t, kBuckets> counts{};
  };
  Epoch& EpochAt(Time now) {
    const int64_t second = ToMs(now) / 1000;
    Epoch& e = epochs_[static_cast<size_t>(second % kEpochs)];
    if (e.second != second) e = Epoch{second, 0, {}};
    return e;
  }
  std::array<Epoch, kEpochs> epochs_{};
};

}  // namespace bulwark::controller
