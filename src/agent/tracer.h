// The on-demand tracer: every thread's stack of a running process, from
// outside it, for any program (not only bulwark-train).
//
// eu-stack (elfutils) first: it attaches with ptrace, unwinds every thread
// and detaches in tens of milliseconds; gdb in batch mode is the fallback
// (several times slower on a libtorch process). Both are Debian packages
// that scripts/install-deps.sh installs.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark::agent {

struct CapturedStack {
  std::string text;  // the tool's output: "TID n:" blocks of "#k 0x... symbol" lines
  std::string tool;  // "eu-stack" or "gdb"
  double ms = 0;
};

// Captures `pid`'s stacks within `budget`; Unavailable with both tools' errors
// when neither worked (process gone, ptrace refused, tool missing).
Result<CapturedStack> CaptureStacks(pid_t pid, std::chrono::milliseconds budget);

// Runs argv with stdout captured, killed after `budget`. For the tracer and its tests.
Result<std::string> RunCaptured(const std::vector<std::string>& argv, std::chrono::milliseconds budget, int* exit_code);

}  // namespace bulwark::agent
