// In-process stack capture with elfutils' libdw: every thread of another
// process, unwound without running an external tool.
//
// Why: the GPU machines bulwark runs on carry neither eu-stack nor gdb, and
// no package registry to install them; libdw is a library the agent links
// (it travels with the agent's other shared libraries). It is the same
// unwinder eu-stack is built on, so the speed and the output are eu-stack's.
#pragma once

#include <sys/types.h>

#include <string>

#include "common/status.h"

namespace bulwark::agent {

// Attaches to `pid` with ptrace (every thread stops), unwinds each thread
// and detaches. The text is eu-stack's: "PID n - process", then per thread
// "TID n:" and "#k 0x<pc> <demangled symbol>" lines, the main thread first.
// Blocks for as long as the attach does (a process in uninterruptible
// sleep does not stop), so call it where a deadline can end it: tracer.cc
// runs it in a child process.
Result<std::string> UnwindAllThreads(pid_t pid);

}  // namespace bulwark::agent
