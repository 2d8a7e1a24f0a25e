// The Prometheus text exposition format (version 0.0.4), written by hand:
// a family is a # HELP and a # TYPE line followed by its samples. Small
// enough that a client library (Debian 12 packages none for C++) would add
// more than it saves; `promtool check metrics` validates the output in
// tests/unit/metrics_test.cc (the controller's) and tests/unit/agent_metrics_test.cc.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace bulwark {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

class MetricsText {
 public:
  // Starts a family. `type`: "gauge", "counter" or "histogram"; a counter's
  // name ends in _total (promtool's lint asks for it).
  void Family(const std::string& name, const char* type, const std::string& help);
  void Sample(const std::string& name, const MetricLabels& labels, double value);
  // A whole histogram family from raw observations: cumulative buckets at
  // `bounds` (ascending, +Inf added), _sum and _count.
  void Histogram(const std::string& name, const std::string& help, const std::vector<double>& bounds,
                 const std::vector<double>& observations);

  // The same from counts kept by the observer: `at_or_below[i]` observations
  // were <= bounds[i] (cumulative), `count` and `sum` over all of them.
  void HistogramCounts(const std::string& name, const std::string& help, const std::vector<double>& bounds,
                       const std::vector<int64_t>& at_or_below, int64_t count, double sum);

  const std::string& text() const { return out_; }

 private:
  std::string out_;
};

// A label value with \, " and newline escaped as the format requires.
std::string EscapeLabelValue(const std::string& v);
// A sample value: integers without a decimal point, NaN and ±Inf as the
// format spells them.
std::string FormatSampleValue(double v);

}  // namespace bulwark
