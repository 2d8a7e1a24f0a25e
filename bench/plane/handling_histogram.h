// The controller's own report handling time (plane/report_latency.h), read
// from its /metrics before and after the bench's steady window: the
// histogram's buckets, and a quantile of what the window added to them.
#pragma once

#include <httplib.h>

#include <cstdlib>
#include <map>
#include <sstream>
#include <string>

namespace plane_bench {

// Upper bound (s; +Inf as a large number) -> observations at or below it.
using Buckets = std::map<double, double>;

// bulwark_report_handling_seconds_bucket in a Prometheus text.
inline Buckets ParseHandlingBuckets(const std::string& text) {
  Buckets out;
  std::istringstream in(text);
  const std::string key = "bulwark_report_handling_seconds_bucket{le=\"";
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) != 0) continue;
    const std::string le = line.substr(key.size(), line.find('"', key.size()) - key.size());
    out[le == "+Inf" ? 1e9 : std::atof(le.c_str())] = std::atof(line.c_str() + line.rfind(' ') + 1);
  }
  return out;
}

// The same from the controller's metrics URL (http://HOST:PORT/metrics, as
// controller.metrics holds it); empty if it cannot be read.
inline Buckets HandlingBuckets(const std::string& url) {
  const std::string prefix = "http://";
  const size_t host_at = url.rfind(prefix, 0) == 0 ? prefix.size() : 0;
  const size_t colon = url.find(':', host_at), slash = url.find('/', host_at);
  if (colon == std::string::npos || slash == std::string::npos) return {};
  httplib::Client c(url.substr(host_at, colon - host_at), std::atoi(url.c_str() + colon + 1));
  c.set_read_timeout(30, 0);
  auto res = c.Get(url.substr(slash).c_str());
  if (!res || res->status != 200) return {};
  return ParseHandlingBuckets(res->body);
}

// The q-quantile (ms) of the observations between `before` and `after`,
// interpolated within its bucket as Prometheus's histogram_quantile does;
// -1 when there are none.
inline double WindowQuantileMs(const Buckets& before, const Buckets& after, double q) {
  const double total = after.empty() ? 0 : after.rbegin()->second - (before.empty() ? 0 : before.rbegin()->second);
  if (total <= 0) return -1;
  double lower = 0, below = 0;
  for (const auto& [le, n] : after) {
    auto b = before.find(le);
    const double count = n - (b == before.end() ? 0 : b->second);
    if (count >= q * total) {
      if (le >= 1e9) return lower * 1000;  // in +Inf: its lower bound, as Prometheus
      return (lower + (le - lower) * (count - below > 0 ? (q * total - below) / (count - below) : 0)) * 1000;
    }
    lower = le;
    below = count;
  }
  return -1;
}

}  // namespace plane_bench
