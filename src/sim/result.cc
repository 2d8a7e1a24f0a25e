#include "sim/result.h"

#include <algorithm>

namespace bulwark::sim {

using controller::Duration;
using controller::LedgerSegment;
using controller::TimeCategory;
using controller::ToMs;

namespace {

// Productive milliseconds in [timeline start, t], by prefix sums.
struct ProductiveCurve {
  std::vector<int64_t> starts, prefix;  // prefix[i]: productive before segment i
  const std::vector<LedgerSegment>* segs;

  explicit ProductiveCurve(const std::vector<LedgerSegment>& s) : segs(&s) {
    int64_t acc = 0;
    for (const LedgerSegment& x : s) {
      starts.push_back(ToMs(x.start));
      prefix.push_back(acc);
      if (x.category == TimeCategory::kProductive) acc += ToMs(x.end) - ToMs(x.start);
    }
  }
  int64_t At(int64_t t) const {
    auto it = std::upper_bound(starts.begin(), starts.end(), t);
    if (it == starts.begin()) return 0;
    const size_t i = static_cast<size_t>(it - starts.begin()) - 1;
    const LedgerSegment& x = (*segs)[i];
    int64_t in = std::min(t, ToMs(x.end)) - ToMs(x.start);
    return prefix[i] + (x.category == TimeCategory::kProductive ? std::max<int64_t>(0, in) : 0);
  }
};

}  // namespace

double MinWindowEttr(const std::vector<LedgerSegment>& timeline, Duration window) {
  if (timeline.empty()) return 0;
  const int64_t begin = ToMs(timeline.front().start), end = ToMs(timeline.back().end);
  const int64_t w = std::min<int64_t>(ToMs(window), end - begin);
  if (w <= 0) return 0;
  ProductiveCurve curve(timeline);
  double best = 1.0;
  auto consider = [&](int64_t window_end) {
    window_end = std::clamp(window_end, begin + w, end);
    const double p = static_cast<double>(curve.At(window_end) - curve.At(window_end - w));
    best = std::min(best, p / static_cast<double>(w));
  };
  for (const LedgerSegment& s : timeline) {
    consider(ToMs(s.start));
    consider(ToMs(s.start) + w);
  }
  consider(end);
  return best;
}

double LongestUnproductive(const std::vector<LedgerSegment>& timeline) {
  int64_t longest = 0, run = 0;
  for (const LedgerSegment& s : timeline) {
    if (s.category == TimeCategory::kProductive) {
      run = 0;
      continue;
    }
    run += ToMs(s.end) - ToMs(s.start);
    longest = std::max(longest, run);
  }
  return static_cast<double>(longest) / 1000.0;
}

}  // namespace bulwark::sim
