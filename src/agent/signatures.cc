#include "agent/signatures.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "common/files.h"

namespace bulwark::agent {
namespace {

// libstdc++'s regex compiles and matches by recursion: a deeply nested or
// very long pattern, or a `.*` run along a long line, overflows the stack
// (found by fuzz/signatures_fuzz.cc; the shipped nccl_network signature
// crashed the agent on a 100 KB log line). The shipped patterns are at most
// 109 bytes with one level of groups; these limits leave room for any
// sensible extension.
constexpr size_t kMaxRegexBytes = 512;
constexpr int kMaxGroupDepth = 8;
// libstdc++ backtracks by default: exponential on patterns like `.*.*.*z`,
// and recursive along the line. Its Thompson-NFA mode is polynomial and
// recurses only along the pattern.
#if defined(__GLIBCXX__)
constexpr auto kRegexMode = std::regex_constants::__polynomial;
#else
constexpr auto kRegexMode = std::regex_constants::syntax_option_type{};
#endif
// A log line is matched on its first and last kMatchWindow bytes: error
// text sits at the start of a line or at its end, after a dump.
constexpr size_t kMatchWindow = 4096;

// The deepest nesting of ( ) in `re`, not counting escaped parentheses.
int GroupDepth(const std::string& re) {
  int depth = 0, deepest = 0;
  for (size_t i = 0; i < re.size(); ++i) {
    if (re[i] == '\\') {
      ++i;
    } else if (re[i] == '(') {
      deepest = std::max(deepest, ++depth);
    } else if (re[i] == ')') {
      --depth;
    }
  }
  return deepest;
}

// "host:port" from its parts when they make one (a port is 1-5 digits),
// else "".
std::string HostPort(const std::string& host, const std::string& port) {
  if (host.empty() || port.empty() || port.size() > 5) return "";
  if (!std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) return "";
  return host + ":" + port;
}

// The address after `at` in `line`: "[host]:port" or "host:port", the
// port's digits ending it.
std::string AddressAt(const std::string& line, size_t at) {
  size_t end = at;
  while (end < line.size() && line[end] != ' ' && line[end] != ',' && line[end] != '\t') ++end;
  std::string token = line.substr(at, end - at);
  while (!token.empty() && !std::isdigit(static_cast<unsigned char>(token.back()))) token.pop_back();
  if (!token.empty() && token[0] == '[') {
    const size_t close = token.find("]:");
    if (close == std::string::npos) return "";
    return HostPort(token.substr(1, close - 1), token.substr(close + 2));
  }
  const size_t colon = token.rfind(':');
  if (colon == std::string::npos) return "";
  return HostPort(token.substr(0, colon), token.substr(colon + 1));
}

}  // namespace

std::string UnreachablePeer(const std::vector<std::string>& lines) {
  // Plain searches, not regexes: a log line may be 100 KB (see above).
  static const char* const kMarkers[] = {"connecting to ring peer ", "] connect ", "failed to connect to "};
  std::string found;
  for (const std::string& l : lines) {
    for (const char* marker : kMarkers) {
      const size_t at = l.find(marker);
      if (at == std::string::npos) continue;
      std::string addr = AddressAt(l, at + std::strlen(marker));
      if (!addr.empty()) found = std::move(addr);
    }
  }
  return found;
}

std::string ClosedPeer(const std::vector<std::string>& lines) {
  // Gloo says "Connection closed by peer [H]:P" on a read of nothing (FIN),
  // and "Read error [H]:P: Connection reset by peer" or "Write error [H]:P:
  // Broken pipe" (RST): the address follows the first marker, and comes
  // first in the others.
  static const char* const kCloses[] = {"reset by peer", "Broken pipe"};
  std::string found;
  for (const std::string& l : lines) {
    std::string addr;
    if (const size_t at = l.find("closed by peer "); at != std::string::npos) {
      addr = AddressAt(l, at + std::strlen("closed by peer "));
    } else if (std::any_of(std::begin(kCloses), std::end(kCloses),
                           [&](const char* m) { return l.find(m) != std::string::npos; })) {
      for (const char* before : {"Read error ", "Write error "}) {
        if (const size_t at = l.find(before); at != std::string::npos) addr = AddressAt(l, at + std::strlen(before));
      }
    }
    if (!addr.empty()) found = std::move(addr);
  }
  return found;
}

Result<SignatureTable> SignatureTable::Parse(const std::string& text, const std::string& source) {
  SignatureTable t;
  size_t pos = 0;
  int lineno = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    const std::string where = source + ":" + std::to_string(lineno);
    const size_t tab = line.find('\t');
    if (tab == std::string::npos || tab == 0 || tab + 1 >= line.size()) {
      return Status::InvalidArgument(where + ": expected NAME<TAB>REGEX, got '" + line + "'");
    }
    Entry e;
    e.name = line.substr(0, tab);
    const std::string re = line.substr(tab + 1);
    if (re.size() > kMaxRegexBytes || GroupDepth(re) > kMaxGroupDepth) {
      return Status::InvalidArgument(where + ": signature '" + e.name + "' has a regex longer than " +
                                     std::to_string(kMaxRegexBytes) + " bytes or nested deeper than " +
                                     std::to_string(kMaxGroupDepth) + " groups; split it into several lines");
    }
    try {
      e.re = std::regex(re, std::regex::extended | std::regex::icase | std::regex::nosubs | kRegexMode);
    } catch (const std::regex_error& err) {
      return Status::InvalidArgument(where + ": signature '" + e.name + "' has a bad regex: " + err.what());
    }
    t.entries_.push_back(std::move(e));
  }
  return t;
}

Result<SignatureTable> SignatureTable::Load(const std::string& path) {
  Result<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status().Annotate("signature table");
  return Parse(*text, path);
}

void SignatureTable::Prepend(const SignatureTable& other) {
  entries_.insert(entries_.begin(), other.entries_.begin(), other.entries_.end());
}

std::string SignatureTable::Match(const std::vector<std::string>& lines) const {
  for (const Entry& e : entries_) {
    for (const std::string& l : lines) {
      if (l.size() <= 2 * kMatchWindow) {
        if (std::regex_search(l, e.re)) return e.name;
        continue;
      }
      if (std::regex_search(l.begin(), l.begin() + kMatchWindow, e.re) ||
          std::regex_search(l.end() - kMatchWindow, l.end(), e.re)) {
        return e.name;
      }
    }
  }
  return "";
}

}  // namespace bulwark::agent
