#include "controller/time.h"

#include <cstdio>

namespace bulwark::controller {

std::string FormatDuration(Duration d) {
  int64_t ms = d.count();
  const char* sign = ms < 0 ? "-" : "";
  if (ms < 0) ms = -ms;
  char buf[48];
  // Round thresholds read as configured ("10min", "30s"); others keep milliseconds.
  if (ms != 0 && ms % 60000 == 0) {
    std::snprintf(buf, sizeof(buf), "%s%lldmin", sign, static_cast<long long>(ms / 60000));
  } else if (ms % 1000 == 0) {
    std::snprintf(buf, sizeof(buf), "%s%llds", sign, static_cast<long long>(ms / 1000));
  } else {
    std::snprintf(buf, sizeof(buf), "%s%lld.%03llds", sign, static_cast<long long>(ms / 1000),
                  static_cast<long long>(ms % 1000));
  }
  return buf;
}

std::string FormatTime(Time t) { return "t+" + FormatDuration(t.time_since_epoch()); }

}  // namespace bulwark::controller
