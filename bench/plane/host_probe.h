// What bulwark-plane-bench reads off this host about a process it started
// (the controller): its CPU time, resident memory and threads from /proc,
// and the journal's rows and size; plus the percentile of a sample.
#pragma once

#include <unistd.h>
#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace plane_bench {

inline int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}
inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
inline std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// Controller process figures from /proc.
struct Proc {
  double cpu_s = 0;  // user + system
  double rss_mib = 0;
  int threads = 0;
};
inline Proc ReadProc(pid_t pid) {
  Proc p;
  std::string stat = ReadAll("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = stat.rfind(')');
  if (close != std::string::npos) {
    std::istringstream in(stat.substr(close + 2));
    std::string f;
    std::vector<std::string> v;
    while (in >> f) v.push_back(f);
    // Fields after the comm: state is v[0]; utime is field 14 -> v[11], stime v[12].
    if (v.size() > 12) p.cpu_s = (std::stod(v[11]) + std::stod(v[12])) / sysconf(_SC_CLK_TCK);
  }
  std::istringstream st(ReadAll("/proc/" + std::to_string(pid) + "/status"));
  std::string line;
  while (std::getline(st, line)) {
    if (line.rfind("VmRSS:", 0) == 0) p.rss_mib = std::stod(line.substr(6)) / 1024.0;
    if (line.rfind("Threads:", 0) == 0) p.threads = std::stoi(line.substr(8));
  }
  return p;
}
// The journal's rows and their bytes (sqlite3's command line, read-only:
// the controller writes in WAL mode, so a reader does not stop it).
inline std::pair<int64_t, int64_t> JournalRows(const std::string& db) {
  std::pair<int64_t, int64_t> r{0, 0};
  FILE* p = popen(("sqlite3 -readonly " + db + " 'select max(seq), sum(length(record)) from journal' 2>/dev/null").c_str(), "r");
  if (!p) return r;
  long long a = 0, b = 0;
  if (std::fscanf(p, "%lld|%lld", &a, &b) >= 1) r = {a, b};
  pclose(p);
  return r;
}
inline int64_t FileSize(const std::string& path) {
  std::error_code ec;
  const auto n = std::filesystem::file_size(path, ec);
  return ec ? 0 : static_cast<int64_t>(n);
}

inline double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))];
}

}  // namespace plane_bench
