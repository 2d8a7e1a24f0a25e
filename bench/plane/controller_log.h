// The controller's log as the plane bench reads it: each line starts with
// its own stamp ("YYYY-MM-DD HH:MM:SS.mmm", common/log.h), so a decision is
// timed by the controller's clock when it was made, not by when the bench
// got round to reading the file.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "host_probe.h"

namespace plane_bench {

struct LogLine {
  int64_t ms = -1;  // the line's stamp, wall ms; -1: no such line in time
  size_t end = 0;   // where the next search may start
  std::string text;
};

inline int64_t StampMs(const char* line) {
  std::tm tm{};
  int ms = 0;
  if (std::sscanf(line, "%d-%d-%d %d:%d:%d.%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
                  &tm.tm_sec, &ms) != 7) {
    return -1;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<int64_t>(timegm(&tm)) * 1000 + ms;
}

// The first whole line after byte `from` of `path` that `match` accepts,
// polled until `timeout_s` passes.
inline LogLine WaitForLine(const std::string& path, size_t from, const std::function<bool(const std::string&)>& match,
                           double timeout_s) {
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < timeout_s) {
    const std::string log = ReadAll(path);
    for (size_t at = from; at < log.size();) {
      const size_t eol = log.find('\n', at);
      if (eol == std::string::npos) break;  // a line still being written
      const std::string line = log.substr(at, eol - at);
      if (match(line)) return {StampMs(line.c_str()), eol + 1, line};
      at = eol + 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return {};
}

// A decision: an action line of the controller's, other than topping up the pool.
// A job's lines on a fleet begin "job NAME: " (plane/fleet.h).
inline bool IsDecision(const std::string& line) {
  const bool action = line.find("] info: action ") != std::string::npos ||
                      (line.find("] info: job ") != std::string::npos && line.find(": action ") != std::string::npos);
  return action && line.find("action replenish_standby") == std::string::npos;
}

// "[a, b, ...]" with two decimals: a JSON list of seconds.
inline std::string JsonList(const std::vector<double>& v) {
  std::string s = "[";
  char buf[32];
  for (size_t i = 0; i < v.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%.2f", i ? ", " : "", v[i]);
    s += buf;
  }
  return s + "]";
}

// Lines of `log` that contain `a` and, after it, `b`.
inline int CountIn(const std::string& log, const std::string& a, const std::string& b) {
  int n = 0;
  for (size_t at = log.find(a); at != std::string::npos; at = log.find(a, at + 1)) {
    const size_t eol = log.find('\n', at);
    n += log.substr(at, eol == std::string::npos ? std::string::npos : eol - at).find(b) != std::string::npos;
  }
  return n;
}
inline int CountLines(const std::string& path, const std::string& a, const std::string& b) {
  return CountIn(ReadAll(path), a, b);
}

}  // namespace plane_bench
