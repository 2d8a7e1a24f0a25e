#include "agent/python_stack.h"

#include <sys/uio.h>

#include <algorithm>
#include <cstring>
#include <set>

namespace bulwark::agent {

bool ProcessMemory::Read(uint64_t addr, void* out, size_t n) {
  if (n == 0) return true;
  iovec local{out, n};
  iovec remote{reinterpret_cast<void*>(addr), n};
  return ::process_vm_readv(pid_, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(n);
}

std::optional<PythonLayout> LayoutFor(int minor) {
  // x86_64 offsets, printed by offsetof() from each version's Py_BUILD_CORE
  // headers (docs/ecosystem.md, "Python frames"; 3.11's match py-spy's).
  PythonLayout l;
  if (minor == 12) {
    l.minor = 12;
    l.runtime_interpreters_head = 40;
    l.interp_threads_head = 72;
    l.tstate_next = 8;
    l.tstate_cframe = 56;
    l.tstate_native_thread_id = 144;
    l.cframe_current_frame = 0;
    l.frame_code = 0;
    l.frame_previous = 8;
    l.frame_prev_instr = 56;
    l.frame_owner = 70;
    l.owner_cstack = 3;  // FRAME_OWNED_BY_CSTACK
    l.code_firstlineno = 68;
    l.code_filename = 112;
    l.code_qualname = 128;
    l.code_linetable = 136;
    l.code_adaptive = 192;
    l.unicode_ascii_data = 40;    // no wstr since 3.12
    l.unicode_compact_data = 56;
    return l;
  }
  if (minor != 11) return std::nullopt;
  l.minor = 11;
  l.runtime_interpreters_head = 40;
  l.interp_threads_head = 16;
  l.tstate_next = 8;
  l.tstate_cframe = 56;
  l.tstate_native_thread_id = 160;
  l.cframe_current_frame = 8;
  l.frame_code = 32;
  l.frame_previous = 48;
  l.frame_prev_instr = 56;
  l.frame_is_entry = 68;
  l.code_firstlineno = 72;
  l.code_filename = 112;
  l.code_qualname = 128;
  l.code_linetable = 136;
  l.code_adaptive = 184;
  l.unicode_ascii_data = 48;    // sizeof(PyASCIIObject)
  l.unicode_compact_data = 72;  // sizeof(PyCompactUnicodeObject)
  return l;
}

Result<PythonLayout> LayoutFromDebugOffsets(const std::string& d) {
  if (d.size() < kDebugOffsetsSize || d.compare(0, 8, "xdebugpy") != 0) {
    return Status::FailedPrecondition("no _Py_DebugOffsets at _PyRuntime; native frames only");
  }
  auto at = [&](size_t pos) {
    uint64_t v = 0;
    std::memcpy(&v, d.data() + pos, sizeof v);
    return v;
  };
  const uint64_t version = at(8);
  if (((version >> 24) & 0xff) != 3 || ((version >> 16) & 0xff) != 13) {
    return Status::FailedPrecondition("_Py_DebugOffsets of version " + std::to_string((version >> 24) & 0xff) + "." +
                                      std::to_string((version >> 16) & 0xff) +
                                      ": its own layout is unknown (3.13's is read); native frames only");
  }
  if (at(16) != 0) return Status::FailedPrecondition("a free-threaded CPython 3.13: native frames only");
  // Where 3.13's _Py_DebugOffsets keeps each offset: offsetof() against its
  // Py_BUILD_CORE headers.
  PythonLayout l;
  l.minor = 13;
  l.runtime_interpreters_head = at(40);
  l.interp_threads_head = at(72);
  l.tstate_next = at(168);
  l.tstate_current_frame = at(184);
  l.tstate_native_thread_id = at(200);
  l.frame_previous = at(232);
  l.frame_code = at(240);        // f_executable: the code object of an ordinary frame
  l.frame_prev_instr = at(248);  // instr_ptr: the instruction running, a call while it calls
  l.frame_owner = static_cast<int64_t>(at(264));
  l.owner_cstack = 3;  // FRAME_OWNED_BY_CSTACK
  l.code_filename = at(280);
  l.code_qualname = at(296);
  l.code_linetable = at(304);
  l.code_firstlineno = at(312);
  l.code_adaptive = at(344);
  l.bytes_size = at(520);
  l.bytes_data = at(528);
  l.unicode_state = at(544);
  l.unicode_length = at(552);
  l.unicode_ascii_data = at(560);
  l.unicode_compact_data = at(560) + 16;  // PyCompactUnicodeObject: utf8_length, utf8 after the ASCII header
  // A torn block would send every read astray: offsets are within a struct.
  for (uint64_t o : {l.runtime_interpreters_head, l.interp_threads_head, l.tstate_next, l.tstate_current_frame,
                     l.tstate_native_thread_id, l.frame_previous, l.frame_code, l.frame_prev_instr, l.code_filename,
                     l.code_qualname, l.code_linetable, l.code_firstlineno, l.code_adaptive, l.bytes_size, l.bytes_data,
                     l.unicode_state, l.unicode_length, l.unicode_ascii_data, static_cast<uint64_t>(l.frame_owner)}) {
    if (o > (1u << 16)) return Status::FailedPrecondition("_Py_DebugOffsets holds an offset of " + std::to_string(o) +
                                                          ": unreadable; native frames only");
  }
  return l;
}

Result<PythonReader> PythonReader::Open(MemoryReader* mem, uint64_t runtime, uint32_t version) {
  const int major = static_cast<int>((version >> 24) & 0xff), minor = static_cast<int>((version >> 16) & 0xff);
  if (major == 3 && minor == 13) {
    std::string block(kDebugOffsetsSize, '\0');
    if (!mem->Read(runtime, block.data(), block.size())) {
      return Status::Unavailable("_Py_DebugOffsets at _PyRuntime is unreadable; native frames only");
    }
    Result<PythonLayout> l = LayoutFromDebugOffsets(block);
    if (!l.ok()) return l.status();
    return PythonReader(mem, runtime, version, *l);
  }
  std::optional<PythonLayout> l = major == 3 ? LayoutFor(minor) : std::nullopt;
  if (!l) {
    return Status::FailedPrecondition("CPython " + std::to_string(major) + "." + std::to_string(minor) +
                                 ": no known layout (3.11, 3.12 and 3.13 are read); native frames only");
  }
  return PythonReader(mem, runtime, version, *l);
}

std::string PythonReader::version() const {
  return std::to_string((version_ >> 24) & 0xff) + "." + std::to_string((version_ >> 16) & 0xff) + "." +
         std::to_string((version_ >> 8) & 0xff);
}

bool PythonReader::ReadPtr(uint64_t addr, uint64_t* out) { return mem_->Read(addr, out, sizeof *out); }

Result<std::map<uint64_t, uint64_t>> PythonReader::ThreadStates() {
  uint64_t interp = 0, t = 0;
  if (!ReadPtr(runtime_ + l_.runtime_interpreters_head, &interp) || interp == 0) {
    return Status::Unavailable("no interpreter at _PyRuntime " + std::to_string(runtime_));
  }
  if (!ReadPtr(interp + l_.interp_threads_head, &t)) return Status::Unavailable("the thread list is unreadable");
  std::map<uint64_t, uint64_t> out;
  for (int n = 0; t != 0 && n < kMaxThreads; ++n) {
    uint64_t tid = 0, next = 0;
    if (!ReadPtr(t + l_.tstate_native_thread_id, &tid) || !ReadPtr(t + l_.tstate_next, &next)) {
      if (out.empty()) return Status::Unavailable("a thread state is unreadable");
      break;  // what was read stands
    }
    if (!out.emplace(tid, t).second) break;  // a cycle, or a torn list
    t = next;
  }
  return out;
}

std::optional<std::string> PythonReader::ReadString(uint64_t obj) {
  int64_t length = 0;
  uint32_t state = 0;
  if (obj == 0 || !mem_->Read(obj + l_.unicode_length, &length, sizeof length) ||
      !mem_->Read(obj + l_.unicode_state, &state, sizeof state)) {
    return std::nullopt;
  }
  const unsigned kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
  if (!compact || length < 0 || (kind != 1 && kind != 2 && kind != 4)) return std::nullopt;
  const size_t n = std::min(static_cast<size_t>(length), kMaxString);
  std::string raw(n * kind, '\0');
  if (!mem_->Read(obj + (ascii ? l_.unicode_ascii_data : l_.unicode_compact_data), raw.data(), raw.size())) {
    return std::nullopt;
  }
  // The text is line-based and travels in protobuf strings: control
  // characters and anything that is not UTF-8 become replacements.
  std::string utf8;
  for (size_t i = 0; i < n; ++i) {
    uint32_t c = 0;
    std::memcpy(&c, raw.data() + i * kind, kind);  // little-endian code units
    if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF) || (ascii && c >= 0x80)) c = 0xFFFD;
    if (c < 0x20 || c == 0x7F) c = '?';
    if (c < 0x80) {
      utf8 += static_cast<char>(c);
    } else if (c < 0x800) {
      utf8 += static_cast<char>(0xC0 | (c >> 6));
      utf8 += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      utf8 += static_cast<char>(0xE0 | (c >> 12));
      utf8 += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      utf8 += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      utf8 += static_cast<char>(0xF0 | (c >> 18));
      utf8 += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      utf8 += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      utf8 += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return utf8;
}

namespace {

// The table's variable-length integers: 6 bits a byte, 0x40 = more follow.
bool Varint(const std::string& t, size_t* pos, uint64_t* out) {
  uint64_t v = 0;
  for (int shift = 0; *pos < t.size() && shift < 64; shift += 6) {
    const uint8_t b = static_cast<uint8_t>(t[(*pos)++]);
    v |= static_cast<uint64_t>(b & 0x3F) << shift;
    if ((b & 0x40) == 0) {
      *out = v;
      return true;
    }
  }
  return false;
}

}  // namespace

int DecodeLineTable(const std::string& t, int first_line, int64_t index) {
  int64_t line = first_line, addr = 0;
  size_t pos = 0;
  while (pos < t.size()) {
    const uint8_t b = static_cast<uint8_t>(t[pos++]);
    if ((b & 0x80) == 0) return 0;  // not an entry's first byte: a torn table
    const int code = (b >> 3) & 15;
    const int length = (b & 7) + 1;
    int64_t delta = 0;
    uint64_t v = 0;
    if (code == 14 || code == 13) {  // long form; no columns: a signed line delta first
      if (!Varint(t, &pos, &v)) return 0;
      delta = (v & 1) ? -static_cast<int64_t>(v >> 1) : static_cast<int64_t>(v >> 1);
      if (code == 14) {
        for (int i = 0; i < 3; ++i) {
          if (!Varint(t, &pos, &v)) return 0;
        }
      }
    } else if (code >= 10 && code <= 12) {  // one-line form: the delta in the code, two column bytes
      delta = code - 10;
      pos += 2;
    } else if (code < 10) {  // short form: same line, one column byte
      pos += 1;
    }                         // 15: no location
    line += delta;
    addr += length;
    if (addr > index) return line > 0 && line < (1 << 30) ? static_cast<int>(line) : 0;
  }
  return 0;
}

int PythonReader::LineOf(uint64_t code, uint64_t prev_instr) {
  int32_t first = 0;
  uint64_t table = 0;
  int64_t size = 0;
  if (!mem_->Read(code + l_.code_firstlineno, &first, sizeof first) || !ReadPtr(code + l_.code_linetable, &table) ||
      !mem_->Read(table + l_.bytes_size, &size, sizeof size)) {
    return 0;
  }
  if (size <= 0 || static_cast<size_t>(size) > kMaxLineTable) return 0;
  std::string t(static_cast<size_t>(size), '\0');
  if (!mem_->Read(table + l_.bytes_data, t.data(), t.size())) return 0;
  const uint64_t start = code + l_.code_adaptive;
  if (prev_instr < start) return first;  // not started: its first line
  return DecodeLineTable(t, first, static_cast<int64_t>((prev_instr - start) / 2));
}

PythonThread PythonReader::Frames(uint64_t tstate) {
  PythonThread out;
  out.tstate = tstate;
  uint64_t cframe = 0, frame = 0;
  const bool read = ReadPtr(tstate + l_.tstate_native_thread_id, &out.native_tid) &&
                    (l_.tstate_cframe < 0 ? ReadPtr(tstate + l_.tstate_current_frame, &frame)
                                          : ReadPtr(tstate + static_cast<uint64_t>(l_.tstate_cframe), &cframe) &&
                                                (cframe == 0 || ReadPtr(cframe + l_.cframe_current_frame, &frame)));
  if (!read) {
    out.error = "its thread state is unreadable";
    return out;
  }
  std::set<uint64_t> seen;
  for (int n = 0; frame != 0; ++n) {
    if (n >= kMaxFrames) {
      out.error = "more than " + std::to_string(kMaxFrames) + " frames; the innermost shown";
      break;
    }
    if (!seen.insert(frame).second) {
      out.error = "the frame chain loops at frame " + std::to_string(n) + " (a torn read)";
      break;
    }
    uint64_t code = 0, prev = 0, instr = 0;
    uint8_t entry = 0, owner = 0;
    if (!ReadPtr(frame + l_.frame_code, &code) || !ReadPtr(frame + l_.frame_previous, &prev) ||
        !ReadPtr(frame + l_.frame_prev_instr, &instr) ||
        (l_.frame_is_entry >= 0 && !mem_->Read(frame + l_.frame_is_entry, &entry, 1)) ||
        (l_.frame_owner >= 0 && !mem_->Read(frame + l_.frame_owner, &owner, 1))) {
      out.error = "frame " + std::to_string(n) + " is unreadable (the process changed or ended)";
      break;
    }
    if (l_.frame_owner >= 0 && owner == l_.owner_cstack) {
      // 3.12's shim: the frames before it ran in one C call of the loop.
      if (!out.frames.empty()) out.frames.back().entry = true;
      frame = prev;
      continue;
    }
    auto cached = code_cache_.find(code);
    if (cached == code_cache_.end()) {
      PythonFrame f;
      uint64_t qual = 0, file = 0;
      std::optional<std::string> q, p;
      if (ReadPtr(code + l_.code_qualname, &qual)) q = ReadString(qual);
      if (ReadPtr(code + l_.code_filename, &file)) p = ReadString(file);
      if (!q) {
        // Not a code object (a torn frame): stop rather than walk garbage.
        out.error = "frame " + std::to_string(n) + " has no readable code object";
        break;
      }
      f.qualname = *q;
      f.file = p.value_or("?");
      cached = code_cache_.emplace(code, f).first;
    }
    PythonFrame f = cached->second;
    f.line = LineOf(code, instr);
    f.entry = entry != 0;
    out.frames.push_back(std::move(f));
    frame = prev;
  }
  return out;
}

std::string PythonFrameName(const PythonFrame& f) {
  return f.qualname + " (" + f.file + ":" + std::to_string(f.line) + ")";
}

std::vector<StackFrame> SpliceFrames(const std::vector<StackFrame>& native, const PythonThread& py) {
  std::vector<StackFrame> out;
  size_t next = 0;  // the next Python frame to place
  auto batch = [&] {
    // One C call of the evaluation loop runs frames up to its entry frame.
    while (next < py.frames.size()) {
      const PythonFrame& f = py.frames[next++];
      out.push_back({0, PythonFrameName(f), true});
      if (f.entry) break;
    }
  };
  size_t last_eval = std::string::npos;
  for (size_t i = 0; i < native.size(); ++i) {
    if (native[i].name.rfind("_PyEval_EvalFrameDefault", 0) == 0) last_eval = i;
  }
  for (size_t i = 0; i < native.size(); ++i) {
    const bool eval = native[i].name.rfind("_PyEval_EvalFrameDefault", 0) == 0;
    if (!eval || next >= py.frames.size()) {
      out.push_back(native[i]);
      continue;
    }
    batch();
    // The outermost evaluation loop takes what is left: an entry flag
    // misread must not lose frames.
    if (i == last_eval) {
      while (next < py.frames.size()) batch();
    }
  }
  // No evaluation loop among the native frames (an unwind cut short): the
  // Python frames still say where the thread was, below the native ones.
  while (next < py.frames.size()) batch();
  return out;
}

}  // namespace bulwark::agent
