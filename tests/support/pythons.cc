#include "support/pythons.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

namespace bulwark::testing {
namespace {

// An executable ELF file: not a wrapper script such as pyenv's shims,
// which run whichever version the directory selects.
bool ElfExecutable(const std::string& p) {
  if (::access(p.c_str(), X_OK) != 0) return false;
  std::ifstream in(p, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in && magic[0] == 0x7f && magic[1] == 'E' && magic[2] == 'L' && magic[3] == 'F';
}

std::string RealPath(const std::string& p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) ? std::string(buf) : p;
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) names.push_back(e->d_name);
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The directories that may hold python3.N executables.
std::vector<std::string> BinDirs() {
  std::vector<std::string> dirs = {"/usr/bin", "/usr/local/bin"};
  std::vector<std::string> pyenvs;
  if (const char* r = std::getenv("PYENV_ROOT")) pyenvs.push_back(r);
  if (const char* h = std::getenv("HOME")) pyenvs.push_back(std::string(h) + "/.pyenv");
  pyenvs.push_back("/root/.pyenv");
  for (const std::string& root : pyenvs) {
    for (const std::string& v : Entries(root + "/versions")) {
      if (v[0] != '.') dirs.push_back(root + "/versions/" + v + "/bin");
    }
  }
  if (const char* path = std::getenv("PATH")) {
    std::istringstream in(path);
    for (std::string d; std::getline(in, d, ':');) if (!d.empty()) dirs.push_back(d);
  }
  return dirs;
}

// "python3.12" -> 12; -1 for anything else (python3.12-config, python3).
int MinorOf(const std::string& name) {
  const std::string prefix = "python3.";
  if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size()) return -1;
  const std::string rest = name.substr(prefix.size());
  if (rest.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::atoi(rest.c_str());
}

}  // namespace

std::vector<Python> FindPythons() {
  std::vector<Python> found;
  std::set<std::string> seen;
  for (const std::string& dir : BinDirs()) {
    for (const std::string& name : Entries(dir)) {
      const int minor = MinorOf(name);
      const std::string path = dir + "/" + name;
      if (minor < 0 || !ElfExecutable(path) || !seen.insert(RealPath(path)).second) continue;
      const std::string lib = dir + "/../lib/libpython3." + std::to_string(minor) + ".so.1.0";
      found.push_back({path, minor, ::access(lib.c_str(), R_OK) == 0});
    }
  }
  std::stable_sort(found.begin(), found.end(), [](const Python& a, const Python& b) {
    return a.minor != b.minor ? a.minor < b.minor : a.shared < b.shared;
  });
  return found;
}

std::string FindPython(int minor) {
  for (const Python& p : FindPythons()) {
    if (p.minor == minor) return p.path;
  }
  return "";
}

std::string FindPython(int minor, bool shared) {
  for (const Python& p : FindPythons()) {
    if (p.minor == minor && p.shared == shared) return p.path;
  }
  return "";
}

std::string PythonCoverage(int from, int to) {
  const std::vector<Python> all = FindPythons();
  std::string covered, missing;
  for (int minor = from; minor <= to; ++minor) {
    std::string here;
    for (const Python& p : all) {
      if (p.minor == minor) here += (here.empty() ? "" : ", ") + p.path + (p.shared ? " (shared)" : "");
    }
    std::string& into = here.empty() ? missing : covered;
    into += (into.empty() ? "" : "; ") + ("3." + std::to_string(minor)) + (here.empty() ? "" : ": " + here);
  }
  return "covered " + (covered.empty() ? std::string("none") : covered) + " | not found here: " +
         (missing.empty() ? std::string("none") : missing);
}

}  // namespace bulwark::testing
