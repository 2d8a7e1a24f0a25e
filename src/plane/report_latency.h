// How long the controller holds each agent report: from its arrival (the
// reaction's start, before it waits for a worker and the plane's lock) to
// its answer. A round trip measured by an agent adds the network and the
// agent's own scheduling; this is the controller's part alone, the "report
// handling" issue 36 bounds (p99 <= 50 ms at 12,500 agents), served on
// /metrics as the histogram bulwark_report_handling_seconds.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace bulwark::plane {

class ReportLatency {
 public:
  // Any thread; no lock (12,500 reports a second).
  void Add(std::chrono::microseconds d);
  // The Prometheus text of the histogram.
  std::string Metrics() const;

  static constexpr std::array<double, 12> kBounds = {0.001, 0.002, 0.005, 0.01, 0.02, 0.05,
                                                     0.1,   0.2,   0.5,   1,    2,    5};

 private:
  std::array<std::atomic<int64_t>, kBounds.size() + 1> in_bucket_{};  // not cumulative; the last is +Inf
  std::atomic<int64_t> sum_us_{0};
};

}  // namespace bulwark::plane
