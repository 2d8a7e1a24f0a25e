#include "common/metrics_text.h"

#include <cmath>
#include <cstdio>

namespace bulwark {

std::string EscapeLabelValue(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string FormatSampleValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.9g", v);
  }
  return buf;
}

void MetricsText::Family(const std::string& name, const char* type, const std::string& help) {
  // HELP text escapes only \ and newline.
  std::string h;
  for (char c : help) h += c == '\n' ? std::string("\\n") : c == '\\' ? std::string("\\\\") : std::string(1, c);
  out_ += "# HELP " + name + " " + h + "\n# TYPE " + name + " " + type + "\n";
}

void MetricsText::Sample(const std::string& name, const MetricLabels& labels, double value) {
  out_ += name;
  if (!labels.empty()) {
    out_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i > 0) out_ += ',';
      out_ += labels[i].first + "=\"" + EscapeLabelValue(labels[i].second) + "\"";
    }
    out_ += '}';
  }
  out_ += ' ' + FormatSampleValue(value) + '\n';
}

void MetricsText::Histogram(const std::string& name, const std::string& help, const std::vector<double>& bounds,
                            const std::vector<double>& observations) {
  Family(name, "histogram", help);
  double sum = 0;
  for (double o : observations) sum += o;
  for (double b : bounds) {
    size_t n = 0;
    for (double o : observations) n += o <= b;
    Sample(name + "_bucket", {{"le", FormatSampleValue(b)}}, static_cast<double>(n));
  }
  Sample(name + "_bucket", {{"le", "+Inf"}}, static_cast<double>(observations.size()));
  Sample(name + "_sum", {}, sum);
  Sample(name + "_count", {}, static_cast<double>(observations.size()));
}

void MetricsText::HistogramCounts(const std::string& name, const std::string& help, const std::vector<double>& bounds,
                                  const std::vector<int64_t>& at_or_below, int64_t count, double sum) {
  Family(name, "histogram", help);
  for (size_t i = 0; i < bounds.size() && i < at_or_below.size(); ++i) {
    Sample(name + "_bucket", {{"le", FormatSampleValue(bounds[i])}}, static_cast<double>(at_or_below[i]));
  }
  Sample(name + "_bucket", {{"le", "+Inf"}}, static_cast<double>(count));
  Sample(name + "_sum", {}, sum);
  Sample(name + "_count", {}, static_cast<double>(count));
}

}  // namespace bulwark
