// Fuzzes the Python stack reader (agent/python_stack.h), which walks another
// process's interpreter structures: a process that changes under the read
// or dies gives it torn pointers, lengths and tables. The input corrupts a
// hand-built CPython 3.11 image (tests/support/python_image.h) as a list of
// edits, 9 bytes each: a little-endian offset into the image (4 bytes, taken
// modulo its size), a width (1 byte: 1, 2, 4 or 8 after masking) and the
// value (4 bytes, sign-extended to the width). The reader must return
// frames and an error, never crash, loop or emit a name that is not UTF-8.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "../tests/support/python_image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bulwark;
  testing::PythonImage img = testing::BuildPython311Image();
  std::string& b = img.mem.bytes;
  for (size_t i = 0; i + 9 <= size; i += 9) {
    uint32_t off = 0;
    int32_t value = 0;
    std::memcpy(&off, data + i, 4);
    std::memcpy(&value, data + i + 5, 4);
    const size_t width = size_t{1} << (data[i + 4] & 3);
    const size_t at = off % b.size();
    const int64_t wide = value;
    std::memcpy(&b[at], &wide, std::min(width, b.size() - at));
  }
  auto r = agent::PythonReader::Open(&img.mem, img.runtime, testing::PythonImage::kVersion);
  if (!r.ok()) return 0;
  auto threads = r->ThreadStates();
  if (!threads.ok()) return 0;
  for (const auto& [tid, tstate] : *threads) {
    agent::PythonThread t = r->Frames(tstate);
    if (t.frames.size() > static_cast<size_t>(agent::PythonReader::kMaxFrames)) __builtin_trap();
    std::vector<agent::StackFrame> native = {{1, "_PyEval_EvalFrameDefault", false}, {2, "main", false}};
    for (const agent::StackFrame& f : agent::SpliceFrames(native, t)) {
      for (unsigned char c : f.name) {
        if (c < 0x20 || c == 0x7F) __builtin_trap();  // the capture is line-based
      }
    }
  }
  return 0;
}
