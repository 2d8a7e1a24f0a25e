#include "agent/signatures.h"

#include "common/files.h"

namespace bulwark::agent {

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
    try {
      e.re = std::regex(line.substr(tab + 1), std::regex::extended | std::regex::icase | std::regex::nosubs);
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
      if (std::regex_search(l, e.re)) return e.name;
    }
  }
  return "";
}

}  // namespace bulwark::agent
