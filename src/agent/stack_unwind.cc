#include "agent/stack_unwind.h"

#include <cxxabi.h>
#include <elfutils/libdwfl.h>
#include <dwarf.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "agent/python_stack.h"

namespace bulwark::agent {
namespace {

constexpr unsigned kMaxFrames = 256;  // eu-stack's default

// A CPython process's interpreter, when the process is one.
struct Python {
  std::optional<ProcessMemory> memory;
  std::optional<PythonReader> reader;
  std::map<uint64_t, uint64_t> tstates;  // kernel thread id -> thread state
};

struct Capture {
  Dwfl* dwfl = nullptr;
  Python* python = nullptr;
  std::vector<std::pair<pid_t, std::string>> threads;  // (tid, its block)
  // How long threads were stopped: dwfl stops one at a time, from its
  // first frame to the end of OnThread. Upper bounds (the attach included).
  double longest_stop_ms = 0, total_stop_ms = 0;
};

struct Frames {
  Dwfl* dwfl = nullptr;
  std::vector<StackFrame> frames;
  // The thread's Python frames, read at its first native frame: dwfl stops
  // a thread only while it unwinds it (dwfl_thread_getframes attaches and
  // detaches), and only that thread changes its own frame chain, so they
  // are consistent with the native ones.
  Python* python = nullptr;
  pid_t tid = 0;
  std::optional<PythonThread> py;
};

// `_PyRuntime` and `Py_Version` in the executable (Debian's python3.11,
// not position-independent) or in libpython (a shared-library build such
// as pyenv's); dwfl gives their addresses with the module's load address
// added.
struct PythonSymbols {
  uint64_t runtime = 0, version = 0;
};

int OnModule(Dwfl_Module* mod, void**, const char* name, Dwarf_Addr, void* arg) {
  auto* s = static_cast<PythonSymbols*>(arg);
  const char* base = name != nullptr ? std::strrchr(name, '/') : nullptr;
  base = base != nullptr ? base + 1 : name;
  // Only the interpreter's own files: extension modules (libtorch_python)
  // refer to _PyRuntime without defining it, and have many symbols.
  if (base == nullptr || (std::strncmp(base, "python", 6) != 0 && std::strncmp(base, "libpython", 9) != 0)) {
    return DWARF_CB_OK;
  }
  const int n = dwfl_module_getsymtab(mod);
  for (int i = 1; i < n; ++i) {
    GElf_Sym sym;
    GElf_Addr addr = 0;
    const char* sname = dwfl_module_getsym_info(mod, i, &sym, &addr, nullptr, nullptr, nullptr);
    if (sname == nullptr || sym.st_shndx == SHN_UNDEF) continue;
    if (std::strcmp(sname, "_PyRuntime") == 0) s->runtime = addr;
    if (std::strcmp(sname, "Py_Version") == 0) s->version = addr;
  }
  return s->runtime != 0 ? DWARF_CB_ABORT : DWARF_CB_OK;
}

// Sets up `py` for a CPython process; "" when it is none, else a line for
// the capture saying what was found ("# python: ...").
std::string FindPython(Dwfl* dwfl, pid_t pid, Python* py) {
  PythonSymbols s;
  dwfl_getmodules(dwfl, OnModule, &s, 0);
  if (s.runtime == 0) return "";
  py->memory.emplace(pid);
  uint32_t version = 0;
  if (s.version == 0 || !py->memory->Read(s.version, &version, sizeof version)) {
    return "# python: a CPython without Py_Version (3.10 or older): its layout is unknown; native frames only\n";
  }
  Result<PythonReader> r = PythonReader::Open(&*py->memory, s.runtime, version);
  if (!r.ok()) return "# python: " + r.status().message() + "\n";
  Result<std::map<uint64_t, uint64_t>> t = r->ThreadStates();
  if (!t.ok()) return "# python: CPython " + r->version() + ": " + t.status().message() + "; native frames only\n";
  py->reader.emplace(std::move(*r));
  py->tstates = std::move(*t);
  return "# python: CPython " + py->reader->version() + ", " + std::to_string(py->tstates.size()) +
         " thread state(s); Python frames replace the evaluation loop's\n";
}

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
  if (f->frames.empty() && f->python != nullptr && f->python->reader) {
    auto t = f->python->tstates.find(static_cast<uint64_t>(f->tid));
    if (t != f->python->tstates.end()) f->py = f->python->reader->Frames(t->second);
  }
  f->frames.push_back({static_cast<uint64_t>(pc), name != nullptr ? Demangle(name) : "", false});
  return f->frames.size() >= kMaxFrames ? DWARF_CB_ABORT : DWARF_CB_OK;
}

int OnThread(Dwfl_Thread* thread, void* arg) {
  auto* c = static_cast<Capture*>(arg);
  const pid_t tid = dwfl_thread_tid(thread);
  Frames f;
  f.dwfl = c->dwfl;
  f.python = c->python;
  f.tid = tid;
  std::string text = "TID " + std::to_string(tid) + ":\n";
  // The thread is stopped within this call only: an upper bound of how long.
  const auto stopped = std::chrono::steady_clock::now();
  // The walk ends in an error at the outermost frame of many threads (no
  // CFI for _start or clone); the frames before it are the stack.
  const int rc = dwfl_thread_getframes(thread, OnFrame, &f);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - stopped).count();
  c->longest_stop_ms = std::max(c->longest_stop_ms, ms);
  c->total_stop_ms += ms;
  if (rc != 0 && f.frames.empty()) text += std::string("# no frames: ") + dwfl_errmsg(-1) + "\n";
  std::vector<StackFrame> frames = std::move(f.frames);
  if (f.py) {
    if (!f.py->error.empty()) text += "# python: partial: " + f.py->error + "\n";
    frames = SpliceFrames(frames, *f.py);
  }
  for (size_t i = 0; i < frames.size(); ++i) {
    char line[64];
    std::snprintf(line, sizeof line, "#%-2zu 0x%016" PRIx64, i, frames[i].pc);
    text += line;
    if (frames[i].python) text += " [py]";
    if (!frames[i].name.empty()) text += " " + frames[i].name;
    text += "\n";
  }
  c->threads.emplace_back(tid, std::move(text));
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
  // Before any thread stops: the symbols are in files, the thread list
  // changes only when threads start or end.
  Python python;
  const std::string python_note = FindPython(dwfl.get(), pid, &python);
  Capture c;
  c.dwfl = dwfl.get();
  c.python = &python;
  if (dwfl_getthreads(dwfl.get(), OnThread, &c) != 0 && c.threads.empty()) {
    return Status::Unavailable("no thread of " + who + ": " + dwfl_errmsg(-1));
  }
  // The stack analyzer takes the first thread listed as the main thread.
  std::stable_sort(c.threads.begin(), c.threads.end(), [pid](const auto& a, const auto& b) {
    if ((a.first == pid) != (b.first == pid)) return a.first == pid;
    return a.first < b.first;
  });
  std::string text = "PID " + std::to_string(pid) + " - process\n" + python_note;
  for (const auto& [tid, block] : c.threads) text += block;
  char stops[128];
  std::snprintf(stops, sizeof stops, "# stopped: one thread at a time, longest %.2f ms, all %zu %.2f ms\n",
                c.longest_stop_ms, c.threads.size(), c.total_stop_ms);
  return text + stops;
}

}  // namespace bulwark::agent
