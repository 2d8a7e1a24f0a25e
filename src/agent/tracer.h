// The on-demand tracer: every thread's stack of a running process, from
// outside it, for any program (not only bulwark-train).
//
// libdw first (stack_unwind.h): elfutils' unwinder linked into the agent,
// so machines without eu-stack or gdb (the GPU hosts) can trace; it runs
// in a forked child so that a process that never stops for ptrace costs
// the budget, not the agent. eu-stack (the same unwinder as a program)
// and gdb in batch mode (several times slower on a libtorch process)
// remain the fallbacks; scripts/install-deps.sh installs both.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark::agent {

struct CapturedStack {
  std::string text;  // "TID n:" blocks of "#k 0x... symbol" lines (gdb: its own thread headers)
  std::string tool;  // "libdw", "eu-stack" or "gdb"
  double ms = 0;
};

enum class StackTool { kLibdw, kEuStack, kGdb };
const char* StackToolName(StackTool tool);

// Captures `pid`'s stacks within `budget`, each tool in turn (libdw,
// eu-stack, gdb); Unavailable with every tool's error when none worked
// (process gone, ptrace refused, tool missing).
Result<CapturedStack> CaptureStacks(pid_t pid, std::chrono::milliseconds budget);

// One tool alone, for comparisons (tests, benches).
Result<CapturedStack> CaptureStacksWith(StackTool tool, pid_t pid, std::chrono::milliseconds budget);

// Runs argv with stdout captured, killed after `budget`. For the tracer and its tests.
// With `keep_stderr`, the child's stderr joins the capture (a diagnostic
// that fails says why there); otherwise it goes to /dev/null.
Result<std::string> RunCaptured(const std::vector<std::string>& argv, std::chrono::milliseconds budget, int* exit_code,
                                bool keep_stderr = false);

}  // namespace bulwark::agent
