#include "plane/report_latency.h"

#include <vector>

#include "common/metrics_text.h"

namespace bulwark::plane {

void ReportLatency::Add(std::chrono::microseconds d) {
  const double s = d.count() / 1e6;
  size_t i = 0;
  while (i < kBounds.size() && s > kBounds[i]) ++i;
  in_bucket_[i].fetch_add(1, std::memory_order_relaxed);
  sum_us_.fetch_add(d.count(), std::memory_order_relaxed);
}

std::string ReportLatency::Metrics() const {
  std::vector<int64_t> at_or_below;
  int64_t n = 0;
  for (size_t i = 0; i < kBounds.size(); ++i) {
    n += in_bucket_[i].load(std::memory_order_relaxed);
    at_or_below.push_back(n);
  }
  n += in_bucket_[kBounds.size()].load(std::memory_order_relaxed);
  MetricsText m;
  m.HistogramCounts("bulwark_report_handling_seconds",
                    "From an agent report's arrival at the controller to its answer: the wait for a worker and "
                    "the job's lock, and the handling",
                    std::vector<double>(kBounds.begin(), kBounds.end()), at_or_below, n,
                    sum_us_.load(std::memory_order_relaxed) / 1e6);
  return m.text();
}

}  // namespace bulwark::plane
