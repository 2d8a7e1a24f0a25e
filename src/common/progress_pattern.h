// ProgressPattern: a job's steps read from its own output, for programs that
// do not speak the rank link. The job file gives a regular expression with
// Python-style named groups, the form users know from `re`:
//
//   progress: {regex: 'step (?P<step>\d+) loss (?P<loss>[0-9.eE+-]+)'}
//
// `step` is required, `loss` optional; `(?<name>...)` is accepted too.
// std::regex (ECMAScript) has no named groups, so Compile rewrites each one
// as a plain capture group and remembers its number; every other construct
// is ECMAScript's. Used by `bulwark submit` to refuse a bad pattern and by
// the agent to match each line a rank prints.
#pragma once

#include <cstdint>
#include <optional>
#include <regex>
#include <string>

#include "common/status.h"

namespace bulwark {

// Where the job's pattern travels from `bulwark submit` to the agents: the
// job's environment, which is journaled with the launch and carried by
// every START_RANKS (so a replayed or restarted controller keeps it).
constexpr const char* kProgressRegexEnv = "BULWARK_PROGRESS_REGEX";

struct ProgressMatch {
  int64_t step = 0;
  std::optional<double> loss;
};

class ProgressPattern {
 public:
  // libstdc++'s regex compiles and matches by recursion: a huge pattern, or
  // a long line under '.*', overflows the stack, and the agent that crashed
  // would look like a dead machine. Progress lines are short.
  static constexpr size_t kMaxPatternChars = 512;
  static constexpr size_t kMaxLineChars = 4096;

  // InvalidArgument, one line, naming what is wrong: no (?P<step>...) group,
  // an unknown group name, a named back-reference, or what std::regex
  // refuses.
  static Result<ProgressPattern> Compile(const std::string& pattern);

  // The step (and loss) of a line the pattern matches anywhere in; nullopt
  // when it does not match or the step group is not a whole number.
  std::optional<ProgressMatch> Match(const std::string& line) const;

  // The ECMAScript form Compile built, for errors and tests.
  const std::string& ecmascript() const { return ecmascript_; }

 private:
  std::regex re_;
  std::string ecmascript_;
  size_t step_group_ = 0;
  size_t loss_group_ = 0;  // 0: none
};

}  // namespace bulwark
