// Python frames of a CPython process, read from outside it.
//
// Why: a PyTorch rank's native stack is a run of `_PyEval_EvalFrameDefault`
// frames over whatever C call it is in, so two ranks blocked at different
// Python call sites inside the same native code look alike. No external
// tool reads CPython 3.11 here (docs/ecosystem.md, "Python frames"), so the
// tracer reads the interpreter's own structures: from `_PyRuntime` to each
// thread state (matched to its kernel thread by `native_thread_id`), then
// its frame chain, each frame's code object (qualified name, file) and the
// line its last instruction belongs to.
//
// Everything is read through a MemoryReader, so that a test can hand it a
// corrupted image. Every read is bounded (threads, frames, string and table
// sizes): a torn chain, a dying process or garbage gives the frames read so
// far and a one-line error, never a crash or an endless walk.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark::agent {

// Reads another process's memory (or a test's image of it).
class MemoryReader {
 public:
  virtual ~MemoryReader() = default;
  // Copies `n` bytes at `addr` into `out`; false when any of them cannot be read.
  virtual bool Read(uint64_t addr, void* out, size_t n) = 0;
};

// A live process's memory through process_vm_readv (the unwinder's
// permissions: same user, or CAP_SYS_PTRACE).
class ProcessMemory final : public MemoryReader {
 public:
  explicit ProcessMemory(int pid) : pid_(pid) {}
  bool Read(uint64_t addr, void* out, size_t n) override;

 private:
  int pid_;
};

// Where the structures are, for one CPython minor version (x86_64).
struct PythonLayout {
  int minor = 0;
  // _PyRuntimeState, PyInterpreterState, PyThreadState. The current frame
  // is in the thread's _PyCFrame up to 3.12 (tstate_cframe, then
  // cframe_current_frame), in the thread state itself from 3.13
  // (tstate_cframe -1, tstate_current_frame).
  uint64_t runtime_interpreters_head = 0, interp_threads_head = 0;
  uint64_t tstate_next = 0, tstate_native_thread_id = 0;
  int64_t tstate_cframe = -1;
  uint64_t cframe_current_frame = 0, tstate_current_frame = 0;
  // _PyInterpreterFrame. Where one C call of the evaluation loop begins:
  // 3.11 marks its first frame (is_entry); 3.12 pushes a shim frame owned
  // by the C stack before it (owner == owner_cstack). -1: no such field.
  uint64_t frame_code = 0, frame_previous = 0, frame_prev_instr = 0;
  int64_t frame_is_entry = -1, frame_owner = -1;
  uint8_t owner_cstack = 3;
  // PyCodeObject
  uint64_t code_firstlineno = 0, code_filename = 0, code_qualname = 0, code_linetable = 0, code_adaptive = 0;
  // PyBytesObject (the location table): its size and its bytes
  uint64_t bytes_size = 16, bytes_data = 32;
  // PyUnicodeObject: the state word, compact ASCII data, compact non-ASCII data
  uint64_t unicode_length = 16, unicode_state = 32, unicode_ascii_data = 0, unicode_compact_data = 0;
};

// The layout of CPython 3.`minor`, when this reader knows it (3.11, 3.12).
// 3.13 publishes its own (LayoutFromDebugOffsets).
std::optional<PythonLayout> LayoutFor(int minor);

// 3.13's layout from the _Py_DebugOffsets block that starts _PyRuntime
// (`block`: its first kDebugOffsetsSize bytes): FailedPrecondition when the
// block does not say 3.13 (its own layout changes with the version), or
// is a free-threaded build's.
constexpr size_t kDebugOffsetsSize = 584;
Result<PythonLayout> LayoutFromDebugOffsets(const std::string& block);

struct PythonFrame {
  std::string qualname;  // "Trainer.step", "main.<locals>.inner", "?" when unreadable
  std::string file;
  int line = 0;          // 0 when unknown
  bool entry = false;    // the first frame a C call of the evaluation loop ran
};

// One thread's Python frames, innermost first. `error` non-empty: the walk
// stopped there, and `frames` is what it read before.
struct PythonThread {
  uint64_t tstate = 0;
  uint64_t native_tid = 0;
  std::vector<PythonFrame> frames;
  std::string error;
};

class PythonReader {
 public:
  // `runtime` is `_PyRuntime`'s address in the process, `version` the
  // value of its `Py_Version` (PY_VERSION_HEX). Unimplemented naming the
  // version for a CPython whose layout this reader does not know.
  static Result<PythonReader> Open(MemoryReader* mem, uint64_t runtime, uint32_t version);

  // Kernel thread id -> thread state, for every thread of the main
  // interpreter (at most kMaxThreads); an error when the list cannot be read.
  Result<std::map<uint64_t, uint64_t>> ThreadStates();
  // The thread's frames. Read while the thread is stopped: only it changes
  // its own frame chain.
  PythonThread Frames(uint64_t tstate);

  std::string version() const;  // "3.11.2"

  static constexpr int kMaxThreads = 1024;
  static constexpr int kMaxFrames = 1024;
  static constexpr size_t kMaxString = 1024;
  static constexpr size_t kMaxLineTable = 1 << 16;

 private:
  PythonReader(MemoryReader* mem, uint64_t runtime, uint32_t version, PythonLayout layout)
      : mem_(mem), runtime_(runtime), version_(version), l_(layout) {}
  bool ReadPtr(uint64_t addr, uint64_t* out);
  // A str object as UTF-8; nullopt when unreadable or not a compact string.
  std::optional<std::string> ReadString(uint64_t obj);
  int LineOf(uint64_t code, uint64_t prev_instr);

  MemoryReader* mem_;
  uint64_t runtime_;
  uint32_t version_;
  PythonLayout l_;
  std::map<uint64_t, PythonFrame> code_cache_;  // code object -> its names (line not set)
};

// The 3.11 location table (Objects/locations.md): the line of code unit
// `index`, counting from `first_line`; 0 when the table does not cover it.
int DecodeLineTable(const std::string& table, int first_line, int64_t index);

// One frame of a thread's merged stack.
struct StackFrame {
  uint64_t pc = 0;
  std::string name;  // native: the symbol; Python: "qualname (file:line)"
  bool python = false;
};

// Native frames innermost first, each evaluation-loop frame
// (_PyEval_EvalFrameDefault) replaced by the Python frames it was running:
// the next frames of `py` up to and including an entry frame. Native
// frames around them stay. Python frames left when the evaluation-loop
// frames ran out follow the last of them (or, with none, the native frames).
std::vector<StackFrame> SpliceFrames(const std::vector<StackFrame>& native, const PythonThread& py);

// "qualname (file:line)", the name a Python frame has in a merged stack.
std::string PythonFrameName(const PythonFrame& f);

}  // namespace bulwark::agent
