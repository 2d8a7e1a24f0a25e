#include "cli/args.h"

#include <unistd.h>

#include <cstdlib>

namespace bulwark::cli {

std::string ExeDir() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string p(buf, static_cast<size_t>(n));
  return p.substr(0, p.rfind('/'));
}

std::string ClusterDir(const Args& a) {
  if (a.Has("dir")) return a.Get("dir");
  if (const char* d = std::getenv("BULWARK_DIR")) return d;
  return ".bulwark";
}

Result<int> IntFlag(const Args& a, const std::string& key, int def) {
  if (!a.Has(key)) return def;
  try {
    return std::stoi(a.Get(key));
  } catch (const std::exception&) {
    return Status::InvalidArgument("--" + key + ": expected an integer, got '" + a.Get(key) + "'");
  }
}

}  // namespace bulwark::cli
