#include "cluster/controllers.h"

#include <algorithm>
#include <sstream>

#include "common/files.h"

namespace bulwark::cluster {
namespace {

// Addresses separated by commas, spaces or newlines; blanks dropped.
std::vector<std::string> Split(const std::string& text) {
  std::string spaced = text;
  std::replace(spaced.begin(), spaced.end(), ',', ' ');
  std::istringstream in(spaced);
  std::vector<std::string> out;
  for (std::string a; in >> a;) out.push_back(a);
  return out;
}

}  // namespace

std::vector<std::string> ControllerAddresses(const Layout& layout, const std::string& flag) {
  if (!flag.empty()) return Split(flag);
  if (Result<std::string> all = ReadFile(layout.controllers_addr()); all.ok() && !Split(*all).empty()) {
    return Split(*all);
  }
  Result<std::string> one = ReadFile(layout.controller_addr());
  return one.ok() ? Split(*one) : std::vector<std::string>{};
}

std::string NextController(const std::vector<std::string>& list, const std::string& failed,
                           const std::string& hint) {
  if (!hint.empty()) return hint;
  if (list.empty()) return failed;
  auto at = std::find(list.begin(), list.end(), failed);
  if (at == list.end()) return list.front();
  return ++at == list.end() ? list.front() : *at;
}

}  // namespace bulwark::cluster
