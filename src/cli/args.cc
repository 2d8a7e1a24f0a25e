#include "cli/args.h"

#include <unistd.h>

#include <cstdlib>
#include <set>

namespace bulwark::cli {
namespace {

const std::set<std::string> kBoolFlags = {"json", "init", "help", "shard-optimizer", "tls", "now"};

}  // namespace

Result<Args> ParseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s.rfind("--", 0) == 0) {
      std::string key = s.substr(2), value;
      const size_t eq = key.find('=');
      if (eq != std::string::npos) {
        value = key.substr(eq + 1);
        key = key.substr(0, eq);
      } else if (kBoolFlags.count(key) == 0) {
        if (i + 1 >= argc) return Status::InvalidArgument("flag --" + key + " needs a value");
        value = argv[++i];
      }
      a.flags[key] = value;
    } else {
      a.positional.push_back(s);
    }
  }
  return a;
}

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
