#include "agent/stack_unwind.h"

#include <cxxabi.h>
#include <elfutils/libdwfl.h>
#include <dwarf.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

namespace bulwark::agent {
namespace {

constexpr unsigned kMaxFrames = 256;  // eu-stack's default

struct Capture {
  Dwfl* dwfl = nullptr;
  std::vector<std::pair<pid_t, std::string>> threads;  // (tid, its block)
};

struct Frames {
  Dwfl* dwfl = nullptr;
  std::string text;
  unsigned n = 0;
};

std::string Demangle(const char* name) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  return status == 0 && d ? std::string(d.get()) : std::string(name);
}

int OnFrame(Dwfl_Frame* frame, void* arg) {
  auto* f = static_cast<Frames*>(arg);
  Dwarf_Addr pc = 0;
  bool activation = false;
  if (!dwfl_frame_pc(frame, &pc, &activation)) return DWARF_CB_ABORT;
  // A return address points after the call: look the caller up at pc - 1.
  const Dwarf_Addr lookup = activation ? pc : pc - 1;
  Dwfl_Module* mod = dwfl_addrmodule(f->dwfl, lookup);
  const char* name = mod != nullptr ? dwfl_module_addrname(mod, lookup) : nullptr;
  char line[64];
  std::snprintf(line, sizeof line, "#%-2u 0x%016" PRIx64, f->n, static_cast<uint64_t>(pc));
  f->text += line;
  if (name != nullptr) f->text += " " + Demangle(name);
  f->text += "\n";
  return ++f->n >= kMaxFrames ? DWARF_CB_ABORT : DWARF_CB_OK;
}

int OnThread(Dwfl_Thread* thread, void* arg) {
  auto* c = static_cast<Capture*>(arg);
  const pid_t tid = dwfl_thread_tid(thread);
  Frames f;
  f.dwfl = c->dwfl;
  f.text = "TID " + std::to_string(tid) + ":\n";
  // The walk ends in an error at the outermost frame of many threads (no
  // CFI for _start or clone); the frames before it are the stack.
  if (dwfl_thread_getframes(thread, OnFrame, &f) != 0 && f.n == 0) {
    f.text += std::string("# no frames: ") + dwfl_errmsg(-1) + "\n";
  }
  c->threads.emplace_back(tid, std::move(f.text));
  return DWARF_CB_OK;
}

}  // namespace

Result<std::string> UnwindAllThreads(pid_t pid) {
  // Local files only: a debuginfod server would turn milliseconds into a
  // network fetch per library.
  ::unsetenv("DEBUGINFOD_URLS");
  static char* debuginfo_path = nullptr;
  static const Dwfl_Callbacks callbacks = {dwfl_linux_proc_find_elf, dwfl_standard_find_debuginfo, nullptr,
                                           &debuginfo_path};
  std::unique_ptr<Dwfl, void (*)(Dwfl*)> dwfl(dwfl_begin(&callbacks), dwfl_end);
  if (!dwfl) return Status::Internal(std::string("dwfl_begin: ") + dwfl_errmsg(-1));
  const std::string who = "process " + std::to_string(pid);
  if (int rc = dwfl_linux_proc_report(dwfl.get(), pid); rc != 0) {
    return Status::NotFound("cannot read the mappings of " + who + ": " +
                            (rc > 0 ? std::strerror(rc) : dwfl_errmsg(-1)));
  }
  if (dwfl_report_end(dwfl.get(), nullptr, nullptr) != 0) {
    return Status::Internal(who + ": " + dwfl_errmsg(-1));
  }
  if (int rc = dwfl_linux_proc_attach(dwfl.get(), pid, false); rc != 0) {
    return Status::Unavailable("cannot attach to " + who + ": " +
                               (rc > 0 ? std::strerror(rc) : dwfl_errmsg(-1)) +
                               " (ptrace refused? run the agent as the ranks' user or allow ptrace)");
  }
  Capture c;
  c.dwfl = dwfl.get();
  if (dwfl_getthreads(dwfl.get(), OnThread, &c) != 0 && c.threads.empty()) {
    return Status::Unavailable("no thread of " + who + ": " + dwfl_errmsg(-1));
  }
  // The stack analyzer takes the first thread listed as the main thread.
  std::stable_sort(c.threads.begin(), c.threads.end(), [pid](const auto& a, const auto& b) {
    if ((a.first == pid) != (b.first == pid)) return a.first == pid;
    return a.first < b.first;
  });
  std::string text = "PID " + std::to_string(pid) + " - process\n";
  for (const auto& [tid, block] : c.threads) text += block;
  return text;
}

}  // namespace bulwark::agent
