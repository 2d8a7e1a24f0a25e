#include "cluster/slurm/slurm_topology.h"

#include <algorithm>
#include <cctype>
#include <sstream>

namespace bulwark::cluster {
namespace {

// "KEY=value" words of one line (values hold no spaces in topology.conf
// and in scontrol's topology output).
std::map<std::string, std::string> Words(const std::string& line) {
  std::map<std::string, std::string> out;
  std::istringstream in(line);
  for (std::string w; in >> w;) {
    const size_t eq = w.find('=');
    if (eq != std::string::npos) out[w.substr(0, eq)] = w.substr(eq + 1);
  }
  return out;
}

// The names one "prefix[ranges]suffix" word stands for.
Status ExpandWord(const std::string& w, std::vector<std::string>& out) {
  const size_t open = w.find('[');
  if (open == std::string::npos) {
    out.push_back(w);
    return Status::OK();
  }
  const size_t close = w.find(']', open);
  if (close == std::string::npos) return Status::InvalidArgument("hostlist '" + w + "': '[' without ']'");
  const std::string prefix = w.substr(0, open), suffix = w.substr(close + 1);
  std::istringstream ranges(w.substr(open + 1, close - open - 1));
  for (std::string r; std::getline(ranges, r, ',');) {
    const size_t dash = r.find('-');
    const std::string lo = r.substr(0, dash), hi = dash == std::string::npos ? lo : r.substr(dash + 1);
    auto digits = [](const std::string& s) {
      return !s.empty() && s.size() < 10 && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
    };
    if (!digits(lo) || !digits(hi) || std::stol(hi) < std::stol(lo)) {
      return Status::InvalidArgument("hostlist '" + w + "': bad range '" + r + "'");
    }
    for (long i = std::stol(lo); i <= std::stol(hi); ++i) {
      std::string n = std::to_string(i);
      if (n.size() < lo.size()) n.insert(0, lo.size() - n.size(), '0');
      out.push_back(prefix + n + suffix);
    }
  }
  return Status::OK();
}

}  // namespace

Result<std::vector<std::string>> ExpandHostlist(const std::string& list) {
  std::vector<std::string> out;
  // Split on the commas outside brackets.
  int depth = 0;
  std::string word;
  for (size_t i = 0; i <= list.size(); ++i) {
    const char c = i < list.size() ? list[i] : ',';
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) {
      if (!word.empty()) BULWARK_RETURN_IF_ERROR(ExpandWord(word, out));
      word.clear();
      continue;
    }
    word += c;
  }
  if (depth != 0) return Status::InvalidArgument("hostlist '" + list + "': unbalanced brackets");
  return out;
}

Result<std::map<std::string, std::string>> LeafSwitches(const std::string& text) {
  std::map<std::string, std::string> leaf;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    line = line.substr(0, line.find('#'));
    const std::map<std::string, std::string> w = Words(line);
    auto name = w.find("SwitchName"), nodes = w.find("Nodes");
    if (name == w.end() || nodes == w.end() || w.count("Switches") != 0) continue;
    Result<std::vector<std::string>> hosts = ExpandHostlist(nodes->second);
    if (!hosts.ok()) return Status::Corrupt("topology: switch " + name->second + ": " + hosts.status().message());
    for (const std::string& h : *hosts) leaf.emplace(h, name->second);
  }
  return leaf;
}

}  // namespace bulwark::cluster
