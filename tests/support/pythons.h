// The CPython interpreters this host has, wherever they were installed:
// Debian's (/usr/bin), /usr/local/bin, pyenv's versions ($PYENV_ROOT,
// ~/.pyenv, /root/.pyenv) and PATH. The Python stack tests run on each one
// they find and name the versions they could not cover, instead of naming
// one developer's paths and skipping quietly elsewhere.
#pragma once

#include <string>
#include <vector>

namespace bulwark::testing {

struct Python {
  std::string path;     // an executable, e.g. /usr/bin/python3.11
  int minor = 0;        // 3.<minor>
  bool shared = false;  // its interpreter lives in libpython3.<minor>.so beside it
};

// Every distinct interpreter (by real path) of CPython 3.x found, oldest
// minor first, the executable's own build before a shared-library one.
std::vector<Python> FindPythons();

// The first interpreter of 3.<minor> found (whose `shared` is as asked);
// "" when there is none.
std::string FindPython(int minor);
std::string FindPython(int minor, bool shared);

// One line for a test's output: which of 3.<from>..3.<to> were found, and
// where, and which were not.
std::string PythonCoverage(int from, int to);

}  // namespace bulwark::testing
