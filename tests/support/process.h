// Real processes for integration tests: spawn a binary with extra
// environment, capture its output, wait with a deadline.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace bulwark::testing {

struct ProcessResult {
  int exit_code = -1;  // -1: killed by a signal or by the deadline
  int signal = 0;
  bool timed_out = false;
  std::string out, err;
  std::string LastLine() const;  // last non-empty stdout line
};

class Process {
 public:
  Process(std::vector<std::string> argv, std::map<std::string, std::string> env = {});
  ~Process();  // kills the child if still running
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  pid_t pid() const { return pid_; }
  ProcessResult Wait(double timeout_s = 120);
  // What the child has written to stdout so far.
  std::string OutputSoFar() const;
  // Polls stdout until it contains `needle`; false after `timeout_s` or if
  // the child exits first.
  bool WaitForOutput(const std::string& needle, double timeout_s);

 private:
  pid_t pid_ = -1;
  std::string out_path_, err_path_;
  bool waited_ = false;
};

inline ProcessResult Run(std::vector<std::string> argv, std::map<std::string, std::string> env = {},
                         double timeout_s = 120) {
  return Process(std::move(argv), std::move(env)).Wait(timeout_s);
}

std::string BinDir();        // where build/bin is, from the build
std::string MakeTempDir();   // a fresh directory under /tmp
int FreePort();              // a TCP port on 127.0.0.1 that was free a moment ago

}  // namespace bulwark::testing
