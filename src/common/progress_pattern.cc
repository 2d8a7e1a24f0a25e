#include "common/progress_pattern.h"

#include <cstdlib>

namespace bulwark {
namespace {

Status Bad(const std::string& pattern, const std::string& what) {
  return Status::InvalidArgument("progress regex '" + pattern + "': " + what);
}

}  // namespace

Result<ProgressPattern> ProgressPattern::Compile(const std::string& pattern) {
  if (pattern.size() > kMaxPatternChars) {
    return Bad(pattern.substr(0, 40) + "...", "longer than " + std::to_string(kMaxPatternChars) + " characters");
  }
  ProgressPattern p;
  std::string out;
  size_t groups = 0;  // capture groups opened so far, named or not: the next one is groups + 1
  bool in_class = false;
  size_t class_body = 0;  // where the open class's members begin (after '[' or '[^')
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\') {  // an escape: the next character is never syntax
      out += c;
      if (i + 1 < pattern.size()) out += pattern[++i];
      continue;
    }
    if (in_class) {
      // "[]a]" and "[^]a]": a ']' first in a class is a literal.
      // Python reads it so; ECMAScript would read "[]" as an empty class,
      // so it is escaped.
      if (c == ']' && i == class_body) {
        out += "\\]";
        continue;
      }
      if (c == ']') in_class = false;
      out += c;
      continue;
    }
    if (c == '[') {
      in_class = true;
      class_body = i + 1 < pattern.size() && pattern[i + 1] == '^' ? i + 2 : i + 1;
      out += c;
      continue;
    }
    if (c != '(') {
      out += c;
      continue;
    }
    // An opening parenthesis: a capture group unless "(?" makes it something else.
    if (i + 1 >= pattern.size() || pattern[i + 1] != '?') {
      ++groups;
      out += c;
      continue;
    }
    size_t name_at = 0;
    if (pattern.compare(i, 4, "(?P<") == 0) name_at = i + 4;
    if (pattern.compare(i, 3, "(?<") == 0 && i + 3 < pattern.size() && pattern[i + 3] != '=' && pattern[i + 3] != '!') {
      name_at = i + 3;
    }
    if (pattern.compare(i, 4, "(?P=") == 0) return Bad(pattern, "named back-references (?P=...) are not supported");
    if (name_at == 0) {  // (?: (?= (?!: no group number
      out += c;
      continue;
    }
    const size_t close = pattern.find('>', name_at);
    if (close == std::string::npos) return Bad(pattern, "unterminated group name at offset " + std::to_string(i));
    const std::string name = pattern.substr(name_at, close - name_at);
    ++groups;
    size_t* slot = name == "step" ? &p.step_group_ : name == "loss" ? &p.loss_group_ : nullptr;
    if (slot == nullptr) return Bad(pattern, "unknown group '" + name + "'; known: step, loss");
    if (*slot != 0) return Bad(pattern, "group '" + name + "' appears twice");
    *slot = groups;
    out += '(';
    i = close;
  }
  if (p.step_group_ == 0) {
    return Bad(pattern, "no (?P<step>...) group, e.g. 'step (?P<step>\\d+)'");
  }
  try {
    p.re_ = std::regex(out, std::regex::ECMAScript | std::regex::optimize);
  } catch (const std::regex_error& e) {
    return Bad(pattern, std::string("not a valid regular expression (") + e.what() + ")");
  }
  p.ecmascript_ = out;
  return p;
}

std::optional<ProgressMatch> ProgressPattern::Match(const std::string& line) const {
  if (line.size() > kMaxLineChars) return std::nullopt;
  std::smatch m;
  if (!std::regex_search(line, m, re_) || !m[step_group_].matched) return std::nullopt;
  const std::string step = m[step_group_].str();
  char* end = nullptr;
  const long long v = std::strtoll(step.c_str(), &end, 10);
  if (step.empty() || end != step.c_str() + step.size() || v < 0) return std::nullopt;
  ProgressMatch out;
  out.step = v;
  if (loss_group_ != 0 && m[loss_group_].matched) {
    const std::string loss = m[loss_group_].str();
    const double l = std::strtod(loss.c_str(), &end);
    if (end != loss.c_str() && !loss.empty()) out.loss = l;
  }
  return out;
}

}  // namespace bulwark
