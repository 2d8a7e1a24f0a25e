// A CPython 3.11 process's memory as agent/python_stack.h reads it, built
// by hand: the runtime, one interpreter, two thread states and their frame
// chains, code objects, strings and location tables. For the reader's unit
// test and its fuzz harness, which corrupt it.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "agent/python_stack.h"

namespace bulwark::testing {

class FakeMemory final : public agent::MemoryReader {
 public:
  static constexpr uint64_t kBase = 0x10000;
  std::string bytes;     // the image, mapped at kBase
  int64_t reads_left = -1;  // >= 0: the process dies after that many reads

  bool Read(uint64_t addr, void* out, size_t n) override {
    if (reads_left == 0) return false;
    if (reads_left > 0) --reads_left;
    if (addr < kBase || addr - kBase > bytes.size() || n > bytes.size() - (addr - kBase)) return false;
    std::memcpy(out, bytes.data() + (addr - kBase), n);
    return true;
  }
  uint64_t Alloc(size_t n) {
    while (bytes.size() % 8 != 0) bytes.push_back('\0');
    const uint64_t at = kBase + bytes.size();
    bytes.resize(bytes.size() + n, '\0');
    return at;
  }
  void Put(uint64_t addr, const void* v, size_t n) { std::memcpy(&bytes[addr - kBase], v, n); }
  void Put64(uint64_t addr, uint64_t v) { Put(addr, &v, 8); }
  void Put32(uint64_t addr, uint32_t v) { Put(addr, &v, 4); }
};

struct PythonImage {
  FakeMemory mem;
  uint64_t runtime = 0;
  static constexpr uint32_t kVersion = 0x030B02F0;  // 3.11.2
  static constexpr uint64_t kMainTid = 4242, kWorkerTid = 4243;
};

// A compact str: ASCII (kind 1), or UCS-2 (kind 2) from `units`.
inline uint64_t PutString(FakeMemory& m, const std::string& ascii, const std::u16string& units = u"") {
  const bool is_ascii = units.empty();
  const size_t len = is_ascii ? ascii.size() : units.size();
  const uint64_t at = m.Alloc((is_ascii ? 48 : 72) + len * (is_ascii ? 1 : 2) + 2);
  m.Put64(at + 16, len);
  // state: kind << 2 | compact << 5 | ascii << 6
  m.Put32(at + 32, ((is_ascii ? 1u : 2u) << 2) | (1u << 5) | ((is_ascii ? 1u : 0u) << 6));
  if (is_ascii) {
    m.Put(at + 48, ascii.data(), len);
  } else {
    m.Put(at + 72, units.data(), len * 2);
  }
  return at;
}

// A code object starting at `first_line`, whose code units 0-1 are on the
// next line and 2-5 two lines further (the 3.11 table's no-column form).
inline uint64_t PutCode(FakeMemory& m, uint64_t qualname, uint64_t file, int first_line) {
  const std::string table = {static_cast<char>(0x80 | (13 << 3) | 1), 2,   // +1 line, 2 units
                             static_cast<char>(0x80 | (13 << 3) | 3), 4};  // +2 lines, 4 units
  const uint64_t bytes = m.Alloc(32 + table.size() + 1);
  m.Put64(bytes + 16, table.size());
  m.Put(bytes + 32, table.data(), table.size());
  const uint64_t code = m.Alloc(184 + 16);
  m.Put32(code + 72, static_cast<uint32_t>(first_line));
  m.Put64(code + 112, file);
  m.Put64(code + 120, qualname);
  m.Put64(code + 128, qualname);
  m.Put64(code + 136, bytes);
  return code;
}

// A frame running `code` at code unit `unit`, after `previous`.
inline uint64_t PutFrame(FakeMemory& m, uint64_t code, int unit, uint64_t previous, bool entry) {
  const uint64_t f = m.Alloc(80);
  m.Put64(f + 32, code);
  m.Put64(f + 48, previous);
  m.Put64(f + 56, code + 184 + 2 * unit);
  m.bytes[f + 68 - FakeMemory::kBase] = entry ? 1 : 0;
  return f;
}

// Main thread: inner (train.py:13) < Model.forward (train.py:23) in one
// evaluation loop, entered from C at <module> (train.py:3). Worker: one
// frame whose name is not ASCII, "lädt_日" (loader.py:12).
inline PythonImage BuildPython311Image() {
  PythonImage img;
  FakeMemory& m = img.mem;
  img.runtime = m.Alloc(0x400);
  const uint64_t interp = m.Alloc(64);
  m.Put64(img.runtime + 40, interp);
  const uint64_t train = PutString(m, "train.py"), loader = PutString(m, "loader.py");
  const uint64_t module = PutFrame(m, PutCode(m, PutString(m, "<module>"), train, 0), 4, 0, true);
  const uint64_t forward = PutFrame(m, PutCode(m, PutString(m, "Model.forward"), train, 20), 5, module, true);
  const uint64_t inner = PutFrame(m, PutCode(m, PutString(m, "inner"), train, 10), 3, forward, false);
  const uint64_t worker = PutFrame(m, PutCode(m, PutString(m, "", u"l\u00e4dt_\u65e5"), loader, 9), 2, 0, true);
  uint64_t next = 0;
  for (auto [tid, frame] : {std::pair{PythonImage::kWorkerTid, worker}, std::pair{PythonImage::kMainTid, inner}}) {
    const uint64_t cframe = m.Alloc(16);
    m.Put64(cframe + 8, frame);
    const uint64_t t = m.Alloc(168);
    m.Put64(t + 8, next);
    m.Put64(t + 56, cframe);
    m.Put64(t + 160, tid);
    next = t;
  }
  m.Put64(interp + 16, next);
  return img;
}

}  // namespace bulwark::testing
