// Real processes for integration tests: spawn a binary with extra
// environment, capture its output, wait with a deadline.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
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
std::string MakeTempDir();   // a fresh directory under /tmp, removed at exit if every test passed

// The trainer's data set from `bulwark-train prepare --corpus kjv` plus
// `args`, prepared once per build directory and shared read-only by every
// test process: CTest runs each test case in a process of its own, and
// preparing took ~4.6 s of each. Fails the calling test if it cannot.
std::string PreparedCorpus(const std::vector<std::string>& args = {});

// Starts `world` bulwark-train ranks of `argv` with the torchrun environment
// (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT) plus
// `env`. Rank 0 starts first with MASTER_PORT=0: its store binds a port the
// kernel picks and announces it, and only then do the others start with that
// port. No port is guessed free and bound later, so no other process can
// take it in between. If rank 0 exits or stays silent for `announce_s`, only
// rank 0 is returned.
std::vector<std::unique_ptr<Process>> StartRanks(const std::vector<std::string>& argv, int world,
                                                 const std::map<std::string, std::string>& env = {},
                                                 double announce_s = 120);

}  // namespace bulwark::testing
