#include "controller/stack_analyzer.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>
#include <sstream>

namespace bulwark::controller {
namespace {

bool StartsWith(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

// Removes balanced <...> (templates) and (...) (arguments) from a symbol;
// "operator<" and the like keep their operator token.
std::string StripBrackets(const std::string& s) {
  std::string out;
  int angle = 0, paren = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (paren == 0 && c == '<' && !(i >= 8 && s.compare(i - 8, 8, "operator") == 0)) {
      ++angle;
    } else if (paren == 0 && c == '>' && angle > 0) {
      --angle;
    } else if (angle == 0 && c == '(') {
      // "(anonymous namespace)" is part of the name, not an argument list.
      if (s.compare(i, 21, "(anonymous namespace)") == 0) {
        out += "(anon)";
        i += 20;
        continue;
      }
      ++paren;
    } else if (angle == 0 && c == ')' && paren > 0) {
      --paren;
    } else if (angle == 0 && paren == 0) {
      out += c;
    }
  }
  return out;
}

// A Python frame the tracer spliced in (agent/python_stack.h), "qualname
// (file:line)" after its "[py] " mark: kept whole, for the line tells call
// sites apart (two collectives, two loader paths in one function), but
// with the file's directory dropped, for ranks may run the same script from
// different directories.
std::string PythonFrame(const std::string& s) {
  const size_t open = s.rfind(" (");
  if (open == std::string::npos || s.back() != ')') return std::string(kPythonMark) + s;
  std::string where = s.substr(open + 2, s.size() - open - 3);
  const size_t slash = where.rfind('/', where.rfind(':'));
  if (slash != std::string::npos) where = where.substr(slash + 1);
  return std::string(kPythonMark) + s.substr(0, open) + " (" + where + ")";
}

// One frame line's function, normalized; empty for a line that is no frame.
std::optional<std::string> FrameName(const std::string& line) {
  std::istringstream in(line);
  std::string num;
  in >> num;
  if (num.size() < 2 || num[0] != '#') return std::nullopt;
  std::string rest;
  std::getline(in, rest);
  size_t p = rest.find_first_not_of(' ');
  if (p == std::string::npos) return std::string("??");
  rest = rest.substr(p);
  // eu-stack: "0x00007f... name"; gdb: "0x00007f... in name (args) at file:line".
  if (StartsWith(rest, "0x")) {
    size_t sp = rest.find(' ');
    rest = sp == std::string::npos ? "" : rest.substr(sp + 1);
    if (StartsWith(rest, "in ")) rest = rest.substr(3);
  }
  if (StartsWith(rest, kPythonMark)) {
    while (!rest.empty() && rest.back() == ' ') rest.pop_back();
    return PythonFrame(rest.substr(std::strlen(kPythonMark)));
  }
  // gdb's " at file:line" / " from lib.so" and eu-stack's " - module".
  for (const char* tail : {" at ", " from ", " - "}) {
    size_t t = rest.find(tail);
    if (t != std::string::npos) rest = rest.substr(0, t);
  }
  rest = StripBrackets(rest);
  // Symbol versions and compiler clone suffixes.
  size_t at = rest.find('@');
  if (at != std::string::npos) rest = rest.substr(0, at);
  for (const char* clone : {" [clone", ".isra.", ".constprop.", ".part.", ".cold"}) {
    size_t c = rest.find(clone);
    if (c != std::string::npos) rest = rest.substr(0, c);
  }
  while (!rest.empty() && rest.back() == ' ') rest.pop_back();
  if (rest.empty() || rest == "??") return std::string("??");
  return rest;
}

bool IsStartupFrame(const std::string& f) {
  return f == "__libc_start_call_main" || f == "__libc_start_main" || f == "_start" || f == "start_thread" ||
         f == "__clone3" || f == "__clone";
}

// Where, in Python, an outlier's stack parts from the majority's, for each
// of the two: its innermost Python frame (what it is doing), and, when that
// is not where the chains part, " via " the first frame that differs when
// both are walked from the outermost frame in (the call site that took it
// there). Without the mark; "" for no Python frames.
std::pair<std::string, std::string> WherePythonDiffers(const std::vector<std::string>& odd,
                                                       const std::vector<std::string>& rest) {
  std::vector<std::string> a, b;
  for (const std::string& f : odd) {
    if (IsPythonFrame(f)) a.push_back(f.substr(std::strlen(kPythonMark)));
  }
  for (const std::string& f : rest) {
    if (IsPythonFrame(f)) b.push_back(f.substr(std::strlen(kPythonMark)));
  }
  if (a.empty()) return {"", ""};
  size_t i = a.size(), j = b.size();
  while (i > 0 && j > 0 && a[i - 1] == b[j - 1]) {
    --i;
    --j;
  }
  auto where = [](const std::vector<std::string>& chain, size_t parted) {
    if (chain.empty()) return std::string();
    return parted > 1 ? chain[0] + " via " + chain[parted - 1] : chain[0];
  };
  return {where(a, i), where(b, j)};
}

std::string Join(const std::vector<std::string>& frames) {
  std::string s;
  for (size_t i = 0; i < frames.size(); ++i) s += (i ? " < " : "") + frames[i];
  return s;
}

}  // namespace

bool IsPythonFrame(const std::string& frame) { return StartsWith(frame, kPythonMark); }

std::string SummarizeFrames(const std::vector<std::string>& frames, size_t limit) {
  std::string s;
  const size_t n = std::min(limit, frames.size());
  for (size_t i = 0; i < n; ++i) s += (i ? " < " : "") + frames[i];
  size_t shown = 0;
  for (size_t i = n; i < frames.size() && shown < kSummaryPythonFrames; ++i) {
    if (!IsPythonFrame(frames[i])) continue;
    s += shown++ == 0 ? " < ... < " : " < ";
    s += frames[i];
  }
  return s;
}

std::string EuStackText(int pid, const std::vector<std::string>& frames) {
  std::string s = "PID " + std::to_string(pid) + " - process\nTID " + std::to_string(pid) + ":\n";
  for (size_t i = 0; i < frames.size(); ++i) {
    s += "#" + std::to_string(i) + "  0x00007f" + std::to_string(1000 + pid * 7 + i) + " " + frames[i] + "\n";
  }
  s += "#" + std::to_string(frames.size()) + "  0x00007f00 __libc_start_call_main\n";
  s += "TID " + std::to_string(pid + 1) + ":\n#0  0x00007f11 epoll_wait\n#1  0x00007f12 start_thread\n";
  return s;
}

std::vector<std::string> NormalizeMainThread(const std::string& text) {
  std::vector<std::string> frames;
  std::istringstream in(text);
  std::string line;
  bool in_thread = false;
  while (std::getline(in, line)) {
    // A thread header: eu-stack "TID 123:", gdb "Thread 1 (Thread 0x... (LWP 123)):".
    if (StartsWith(line, "TID ") || StartsWith(line, "Thread ")) {
      if (in_thread) break;  // the main thread is the first one listed
      in_thread = true;
      continue;
    }
    std::optional<std::string> f = FrameName(line);
    if (!f) continue;
    in_thread = true;
    if (IsStartupFrame(*f)) break;
    if (*f == "??" && !frames.empty() && frames.back() == "??") continue;
    frames.push_back(*f);
  }
  // Unnamed frames at the bottom (a stripped main) say nothing.
  while (!frames.empty() && frames.back() == "??") frames.pop_back();
  return frames;
}

StackAnalysis AnalyzeStacks(const std::vector<RankStack>& stacks, const Topology& topology,
                            const std::map<int, MachineId>& machine_of) {
  StackAnalysis a;
  std::map<std::string, StackGroup> by_sig;
  std::set<int> seen;
  // Ranks blocked in the same place often send byte-identical texts (one
  // capture per machine for all its ranks): each distinct text is parsed once.
  std::map<std::string, std::vector<std::string>> parsed;
  for (const RankStack& s : stacks) {
    if (s.rank < 0 || s.rank >= topology.world || !seen.insert(s.rank).second) continue;
    auto it = parsed.find(s.text);
    if (it == parsed.end()) it = parsed.emplace(s.text, NormalizeMainThread(s.text)).first;
    const std::vector<std::string>& frames = it->second;
    if (frames.empty()) continue;  // no usable stack: missing
    StackGroup& g = by_sig[Join(frames)];
    if (g.ranks.empty()) {
      g.signature = Join(frames);
      g.frames = frames;
    }
    g.ranks.push_back(s.rank);
  }
  for (auto& [sig, g] : by_sig) {
    std::sort(g.ranks.begin(), g.ranks.end());
    a.groups.push_back(std::move(g));
  }
  std::sort(a.groups.begin(), a.groups.end(), [](const StackGroup& x, const StackGroup& y) {
    if (x.ranks.size() != y.ranks.size()) return x.ranks.size() > y.ranks.size();
    return x.ranks.front() < y.ranks.front();
  });
  std::set<int> captured;
  for (const StackGroup& g : a.groups) captured.insert(g.ranks.begin(), g.ranks.end());
  for (int r = 0; r < topology.world; ++r) {
    if (!captured.count(r)) a.missing.push_back(r);
  }
  a.has_majority = !a.groups.empty() && (a.groups.size() == 1 || a.groups[0].ranks.size() > a.groups[1].ranks.size());
  if (a.groups.empty()) {
    a.why = "no stack could be captured from any rank";
    return a;
  }
  if (!a.has_majority) {
    a.why = "no majority: " + std::to_string(a.groups.size()) + " stack groups, the largest two of " +
            std::to_string(a.groups[0].ranks.size()) + " rank(s) each; nothing to single out";
    return a;
  }
  std::set<int> outliers(a.missing.begin(), a.missing.end());
  for (size_t i = 1; i < a.groups.size(); ++i) outliers.insert(a.groups[i].ranks.begin(), a.groups[i].ranks.end());
  a.outliers.assign(outliers.begin(), outliers.end());
  if (a.outliers.empty()) {
    a.why = "all " + std::to_string(a.groups[0].ranks.size()) +
            " ranks wait in the same place: no outlier to evict";
    return a;
  }
  // More outliers than healthy ranks: the "healthy" group is a guess.
  if (a.outliers.size() * 2 >= static_cast<size_t>(topology.world)) {
    a.why = std::to_string(a.outliers.size()) + " of " + std::to_string(topology.world) +
            " ranks are outliers: too many to call the rest healthy";
    return a;
  }
  a.group = SmallestGroupContaining(topology, a.outliers);
  // A group as large as the job would evict everything; evict the outliers'
  // own machines instead (a data-parallel job's groups are its machines).
  // A singleton group is just the rank: no group to name.
  if (a.group && (a.group->ranks.size() <= 1 || static_cast<int>(a.group->ranks.size()) >= topology.world)) {
    a.group.reset();
  }
  std::vector<int> evict_ranks = a.group ? a.group->ranks : a.outliers;
  std::set<MachineId> machines;
  for (int r : evict_ranks) {
    auto it = machine_of.find(r);
    if (it != machine_of.end()) machines.insert(it->second);
  }
  a.suspects.assign(machines.begin(), machines.end());
  std::string who;
  for (size_t i = 0; i < a.outliers.size() && i < 8; ++i) who += (i ? "," : "") + std::to_string(a.outliers[i]);
  if (a.outliers.size() > 8) who += ",...";
  std::string m;
  for (size_t i = 0; i < a.suspects.size(); ++i) m += (i ? ", " : "") + a.suspects[i];
  a.why = "outlier rank(s) {" + who + "} of " + std::to_string(a.groups.size()) + " stack groups; " +
          (a.group ? "the smallest group holding them is " + a.group->Name() + ", on " : std::string("on ")) + m;
  if (!a.missing.empty()) a.why += " (" + std::to_string(a.missing.size()) + " rank(s) gave no stack)";
  // Python ranks: what the odd ones out and the rest are doing in Python.
  for (size_t i = 1; i < a.groups.size(); ++i) {
    const auto [odd, rest] = WherePythonDiffers(a.groups[i].frames, a.groups[0].frames);
    if (odd.empty()) continue;
    a.why += "; in Python the outliers are at " + odd + (rest.empty() ? "" : ", the others at " + rest);
    break;
  }
  return a;
}

}  // namespace bulwark::controller
