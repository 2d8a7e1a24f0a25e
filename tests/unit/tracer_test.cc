// The in-process tracer (libdw, agent/stack_unwind.h) against real
// processes: every thread, eu-stack's format (the stack analyzer groups its
// output exactly as eu-stack's), the process left running, clear errors,
// and its capture time beside eu-stack's.
#include <gtest/gtest.h>

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <random>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/inspector.h"
#include "agent/python_stack.h"
#include "agent/tracer.h"
#include "common/files.h"
#include "controller/stack_analyzer.h"
#include "support/python_image.h"
#include "support/pythons.h"

namespace bulwark {
namespace {

using agent::StackTool;
constexpr auto kBudget = std::chrono::milliseconds(10000);  // a loaded 2-core host

// Named frames the stacks must show. noinline: each is a frame of its own;
// different bodies, or the linker may fold them into one symbol.
__attribute__((noinline)) void ParkedWorker() {
  for (;;) ::pause();
}
__attribute__((noinline)) void ParkedMain() {
  volatile int wakeups = 0;
  for (;;) {
    ::pause();
    wakeups = wakeups + 1;
  }
}

int Threads(pid_t pid) {
  int n = 0;
  DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/task").c_str());
  if (d == nullptr) return 0;
  while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n;
}

// A child with a main thread and three workers, all parked in pause().
class Parked {
 public:
  Parked() {
    pid_ = ::fork();
    if (pid_ == 0) {
      for (int i = 0; i < 3; ++i) std::thread(ParkedWorker).detach();
      ParkedMain();
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (Threads(pid_) < 4 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~Parked() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

std::vector<pid_t> Tids(const std::string& text) {
  std::vector<pid_t> tids;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("TID ", 0) == 0) tids.push_back(static_cast<pid_t>(std::stol(line.substr(4))));
  }
  return tids;
}

TEST(Libdw, CapturesEveryThreadMainFirstInEuStacksFormat) {
  Parked p;
  ASSERT_EQ(Threads(p.pid()), 4);
  Result<agent::CapturedStack> st = agent::CaptureStacksWith(StackTool::kLibdw, p.pid(), kBudget);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->tool, "libdw");
  EXPECT_EQ(st->text.rfind("PID " + std::to_string(p.pid()) + " - process\nTID " + std::to_string(p.pid()) + ":\n#0  0x", 0),
            0u)
      << st->text;
  const std::vector<pid_t> tids = Tids(st->text);
  ASSERT_EQ(tids.size(), 4u) << st->text;
  EXPECT_EQ(tids[0], p.pid());
  EXPECT_NE(st->text.find("ParkedWorker()"), std::string::npos) << st->text;  // demangled
  // The analyzer reads it as it reads eu-stack's: the main thread's frames,
  // named, down to the test's own function.
  const std::vector<std::string> frames = controller::NormalizeMainThread(st->text);
  ASSERT_FALSE(frames.empty()) << st->text;
  EXPECT_TRUE(std::any_of(frames.begin(), frames.end(),
                          [](const std::string& f) { return f.find("ParkedMain") != std::string::npos; }))
      << st->text;
  EXPECT_EQ(std::count(frames.begin(), frames.end(), "ParkedWorker"), 0) << "only the main thread is its signature";
}

TEST(Libdw, GroupsExactlyAsEuStackDoesAndItsTimeIsPrinted) {
  Parked p;
  std::vector<double> libdw_ms, eu_ms;
  std::vector<std::string> libdw_sig, eu_sig;
  for (int i = 0; i < 5; ++i) {
    Result<agent::CapturedStack> a = agent::CaptureStacksWith(StackTool::kLibdw, p.pid(), kBudget);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    Result<agent::CapturedStack> b = agent::CaptureStacksWith(StackTool::kEuStack, p.pid(), kBudget);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    libdw_ms.push_back(a->ms);
    eu_ms.push_back(b->ms);
    libdw_sig = controller::NormalizeMainThread(a->text);
    eu_sig = controller::NormalizeMainThread(b->text);
    ASSERT_EQ(libdw_sig, eu_sig) << "libdw:\n" << a->text << "\neu-stack:\n" << b->text;
    EXPECT_EQ(Tids(a->text).size(), Tids(b->text).size());
  }
  std::sort(libdw_ms.begin(), libdw_ms.end());
  std::sort(eu_ms.begin(), eu_ms.end());
  std::printf("[ timing ] 4-thread process, median of 5: libdw %.1f ms (min %.1f), eu-stack %.1f ms (min %.1f)\n",
              libdw_ms[2], libdw_ms[0], eu_ms[2], eu_ms[0]);
}

TEST(Libdw, TheProcessRunsOnAfterTheCapture) {
  Parked p;
  ASSERT_TRUE(agent::CaptureStacksWith(StackTool::kLibdw, p.pid(), kBudget).ok());
  // Detached and not left stopped: back in pause(), state S (a tracee left
  // behind would read 't' or 'T').
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  char state = ProcessState(p.pid());
  while (state != 'S' && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    state = ProcessState(p.pid());
  }
  EXPECT_EQ(state, 'S');
  // And it can be captured again (no tracer still attached).
  EXPECT_TRUE(agent::CaptureStacksWith(StackTool::kLibdw, p.pid(), kBudget).ok());
}

TEST(Libdw, AProcessThatIsGoneIsAClearError) {
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  Result<agent::CapturedStack> st = agent::CaptureStacksWith(StackTool::kLibdw, child, kBudget);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("process " + std::to_string(child)), std::string::npos)
      << st.status().message();
  // The chain names every tool it tried.
  Result<agent::CapturedStack> any = agent::CaptureStacks(child, kBudget);
  ASSERT_FALSE(any.ok());
  EXPECT_NE(any.status().message().find("libdw: "), std::string::npos) << any.status().message();
  EXPECT_NE(any.status().message().find("eu-stack: "), std::string::npos) << any.status().message();
}

// --- Python frames (agent/python_stack.h) -----------------------------------

// A python process running a script with known nested functions, its main
// thread and a worker (a non-ASCII name) blocked in time.sleep.
constexpr const char* kPythonScript =
    "import threading, time, os, sys\n"          // 1
    "def inner_sleep():\n"                       // 2
    "    time.sleep(600)\n"                      // 3
    "def middle():\n"                            // 4
    "    inner_sleep()\n"                        // 5
    "class Loader:\n"                            // 6
    "    def outer(self):\n"                     // 7
    "        middle()\n"                         // 8
    "def w\u00f6rker_\u65e5():\n"                // 9
    "    time.sleep(600)\n"                      // 10
    "threading.Thread(target=w\u00f6rker_\u65e5, daemon=True).start()\n"  // 11
    "open(sys.argv[1], 'w').close()\n"           // 12
    "Loader().outer()\n";                        // 13

class PythonProcess {
 public:
  explicit PythonProcess(const std::string& interpreter) {
    char dir[] = "/tmp/bulwark-pystack-XXXXXX";
    dir_ = ::mkdtemp(dir) != nullptr ? dir : "/tmp";
    script_ = dir_ + "/nested.py";
    FILE* f = std::fopen(script_.c_str(), "w");
    std::fputs(kPythonScript, f);
    std::fclose(f);
    const std::string ready = dir_ + "/ready";
    pid_ = ::fork();
    if (pid_ == 0) {
      ::execl(interpreter.c_str(), interpreter.c_str(), script_.c_str(), ready.c_str(), nullptr);
      ::_exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (::access(ready.c_str(), F_OK) != 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~PythonProcess() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    if (dir_ != "/tmp") {  // each run left its script behind: 207 of them here
      ::unlink(script_.c_str());
      ::unlink((dir_ + "/ready").c_str());
      ::rmdir(dir_.c_str());
    }
  }
  pid_t pid() const { return pid_; }
  const std::string& script() const { return script_; }

  // Captures until the main thread is in its innermost function (the
  // script may be a moment from its sleep), at most 10 s.
  std::string Capture() {
    std::string text;
    for (int i = 0; i < 100; ++i) {
      Result<agent::CapturedStack> st = agent::CaptureStacksWith(StackTool::kLibdw, pid_, kBudget);
      EXPECT_TRUE(st.ok()) << st.status().ToString();
      if (!st.ok()) return "";
      text = st->text;
      if (text.find("inner_sleep (") != std::string::npos && text.find("_\u65e5 (") != std::string::npos) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return text;
  }

 private:
  pid_t pid_ = -1;
  std::string dir_, script_;
};

// The block of thread `tid`'s frame lines.
std::vector<std::string> ThreadLines(const std::string& text, size_t which) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  size_t seen = 0;
  while (std::getline(in, line)) {
    if (line.rfind("TID ", 0) == 0) {
      ++seen;
      continue;
    }
    if (seen == which + 1) lines.push_back(line);
  }
  return lines;
}

size_t IndexOf(const std::vector<std::string>& lines, const std::string& needle) {
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].find(needle) != std::string::npos) return i;
  }
  return std::string::npos;
}

// A test on an interpreter this host may lack says which it looked for.
#define SKIP_IF_NONE(interpreter, what)                                                          \
  if ((interpreter).empty()) GTEST_SKIP() << "no " << (what) << " on this host (Python stacks: " \
                                          << testing::PythonCoverage(6, 13) << ")"

void ExpectPythonFramesSpliced(const std::string& interpreter, const std::string& version) {
  SKIP_IF_NONE(interpreter, "CPython " + version);
  PythonProcess p(interpreter);
  const std::string text = p.Capture();
  EXPECT_NE(text.find("# python: CPython " + version + "."), std::string::npos) << text;
  // The main thread: time.sleep's native frames, then the Python frames
  // innermost first with their lines, then the interpreter's native frames
  // down to Py_RunMain; no evaluation-loop frame left. (Debian's stripped
  // executable names only its exported functions: not time_sleep.)
  const std::vector<std::string> main = ThreadLines(text, 0);
  const std::string& s = p.script();
  const size_t sleep = IndexOf(main, "clock_nanosleep"), inner = IndexOf(main, "[py] inner_sleep (" + s + ":3)"),
               middle = IndexOf(main, "[py] middle (" + s + ":5)"),
               outer = IndexOf(main, "[py] Loader.outer (" + s + ":8)"), module = IndexOf(main, "[py] <module> (" + s + ":13)"),
               start = IndexOf(main, " Py_RunMain");
  ASSERT_NE(inner, std::string::npos) << text;
  EXPECT_NE(sleep, std::string::npos) << text;
  EXPECT_LT(sleep, inner) << text;
  // Python-to-Python calls run in the one evaluation loop they replace.
  EXPECT_EQ(middle, inner + 1) << text;
  EXPECT_EQ(outer, middle + 1) << text;
  EXPECT_EQ(module, outer + 1) << text;
  ASSERT_NE(start, std::string::npos) << text;
  EXPECT_LT(module, start) << text;
  EXPECT_EQ(IndexOf(main, "_PyEval_EvalFrameDefault"), std::string::npos) << text;
  // The worker, its name not ASCII, in a thread block of its own.
  EXPECT_NE(text.find("[py] w\u00f6rker_\u65e5 (" + s + ":10)"), std::string::npos) << text;
  EXPECT_EQ(IndexOf(main, "rker_"), std::string::npos) << text;
  // The analyzer groups on the merged frames.
  const std::vector<std::string> frames = controller::NormalizeMainThread(text);
  EXPECT_TRUE(std::any_of(frames.begin(), frames.end(),
                          [](const std::string& f) { return f.find("inner_sleep") != std::string::npos; }))
      << text;
}

// Which interpreters the tests below ran on, and which this host lacks.
TEST(PythonStacks, TheVersionsCoveredAreNamed) {
  std::printf("[ python ] %s\n", testing::PythonCoverage(6, 13).c_str());
}

// Debian's: not position-independent; _PyRuntime in the executable.
TEST(PythonStacks, AnExecutablePython311ShowsPythonFramesSplicedAmongNativeOnes) {
  ExpectPythonFramesSpliced(testing::FindPython(11, false), "3.11");
}

// pyenv's: _PyRuntime in libpython3.11.so.
TEST(PythonStacks, ASharedLibraryPython311ShowsPythonFramesSplicedAmongNativeOnes) {
  ExpectPythonFramesSpliced(testing::FindPython(11, true), "3.11");
}

// 3.12 marks where a C call of the evaluation loop begins with a shim frame
// rather than a flag on the first frame: the same stacks.
TEST(PythonStacks, Python312ShowsPythonFramesSplicedAmongNativeOnes) {
  ExpectPythonFramesSpliced(testing::FindPython(12), "3.12");
}

// What a trace of a machine's Python ranks costs: the agent captures its
// ranks one after another; each thread is stopped only while it is unwound.
TEST(PythonStacks, CaptureTimeOfFourPythonRanksIsPrinted) {
  const std::string interpreter = testing::FindPython(11);
  SKIP_IF_NONE(interpreter, "CPython 3.11");
  std::vector<std::unique_ptr<PythonProcess>> ranks;
  for (int i = 0; i < 4; ++i) ranks.push_back(std::make_unique<PythonProcess>(interpreter));
  for (auto& r : ranks) r->Capture();  // each in its sleeps
  for (size_t n : {2, 4}) {
    const auto t0 = std::chrono::steady_clock::now();
    double longest_stop = 0;
    for (size_t i = 0; i < n; ++i) {
      Result<agent::CapturedStack> st = agent::CaptureStacksWith(StackTool::kLibdw, ranks[i]->pid(), kBudget);
      ASSERT_TRUE(st.ok()) << st.status().ToString();
      EXPECT_NE(st->text.find("[py] inner_sleep ("), std::string::npos) << st->text;
      const size_t at = st->text.find("# stopped: one thread at a time, longest ");
      ASSERT_NE(at, std::string::npos) << st->text;
      longest_stop = std::max(longest_stop, std::atof(st->text.c_str() + at + 41));
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[ timing ] %zu Python 3.11 ranks (2 threads each): captured in %.1f ms, %.1f ms a rank; "
                "a thread stopped at most %.2f ms\n", n, ms, ms / n, longest_stop);
  }
}

void ExpectNativeFramesOnly(const std::string& interpreter, const std::string& note) {
  SKIP_IF_NONE(interpreter, "CPython 3.10 or older");
  PythonProcess p(interpreter);
  Result<agent::CapturedStack> st = agent::CaptureStacksWith(StackTool::kLibdw, p.pid(), kBudget);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_NE(st->text.find(note), std::string::npos) << st->text;
  EXPECT_EQ(st->text.find("[py]"), std::string::npos) << st->text;
  EXPECT_NE(st->text.find("_PyEval_EvalFrameDefault"), std::string::npos) << st->text;
}

TEST(PythonStacks, AnOlderBuildFallsBackToNativeFramesAndSaysSo) {
  std::string older;
  for (int minor = 10; minor >= 6 && older.empty(); --minor) older = testing::FindPython(minor);
  ExpectNativeFramesOnly(older,
                         "# python: a CPython without Py_Version (3.10 or older): its layout is unknown; native "
                         "frames only");
}

// 3.13: the offsets come from the interpreter itself (_Py_DebugOffsets).
TEST(PythonStacks, Python313ShowsPythonFramesSplicedThroughItsDebugOffsets) {
  ExpectPythonFramesSpliced(testing::FindPython(13), "3.13");
}

// --- the reader on a memory image (support/python_image.h) -----------------

bool ValidUtf8WithoutControls(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7F) return false;
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (int k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

TEST(PythonReader, ReadsEveryThreadsFramesNamesAndLinesFromAnImage) {
  testing::PythonImage img = testing::BuildPython311Image();
  auto r = agent::PythonReader::Open(&img.mem, img.runtime, testing::PythonImage::kVersion);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->version(), "3.11.2");
  auto threads = r->ThreadStates();
  ASSERT_TRUE(threads.ok()) << threads.status().ToString();
  ASSERT_EQ(threads->size(), 2u);
  agent::PythonThread main = r->Frames(threads->at(testing::PythonImage::kMainTid));
  EXPECT_EQ(main.error, "");
  ASSERT_EQ(main.frames.size(), 3u);
  EXPECT_EQ(agent::PythonFrameName(main.frames[0]), "inner (train.py:13)");
  EXPECT_EQ(agent::PythonFrameName(main.frames[1]), "Model.forward (train.py:23)");
  EXPECT_EQ(agent::PythonFrameName(main.frames[2]), "<module> (train.py:3)");
  EXPECT_FALSE(main.frames[0].entry);
  EXPECT_TRUE(main.frames[1].entry);
  agent::PythonThread worker = r->Frames(threads->at(testing::PythonImage::kWorkerTid));
  ASSERT_EQ(worker.frames.size(), 1u);
  EXPECT_EQ(agent::PythonFrameName(worker.frames[0]), "l\u00e4dt_\u65e5 (loader.py:12)");
}

TEST(PythonReader, AnUnknownVersionIsRefusedNamingIt) {
  testing::PythonImage img = testing::BuildPython311Image();
  auto r = agent::PythonReader::Open(&img.mem, img.runtime, 0x030E00F0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("CPython 3.14: no known layout"), std::string::npos) << r.status().message();
}

// 3.13's block as its headers lay it out, with its own offsets (values
// printed by offsetof() against 3.13.0's headers).
std::string DebugOffsets313() {
  std::string d(agent::kDebugOffsetsSize, '\0');
  auto put = [&](size_t pos, uint64_t v) { std::memcpy(&d[pos], &v, 8); };
  std::memcpy(&d[0], "xdebugpy", 8);
  put(8, 0x030D00F0);
  for (auto [pos, v] : std::vector<std::pair<size_t, uint64_t>>{
           {40, 632}, {72, 7344}, {168, 8}, {184, 72}, {200, 160}, {232, 8}, {240, 0}, {248, 56}, {264, 70},
           {280, 112}, {296, 128}, {304, 136}, {312, 68}, {344, 200}, {520, 16}, {528, 32}, {544, 32}, {552, 16},
           {560, 40}}) {
    put(pos, v);
  }
  return d;
}

TEST(PythonReader, Python313sLayoutComesFromItsDebugOffsets) {
  Result<agent::PythonLayout> l = agent::LayoutFromDebugOffsets(DebugOffsets313());
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->interp_threads_head, 7344u);
  EXPECT_EQ(l->tstate_cframe, -1);  // the current frame is in the thread state
  EXPECT_EQ(l->tstate_current_frame, 72u);
  EXPECT_EQ(l->frame_owner, 70);
  EXPECT_EQ(l->code_adaptive, 200u);
  EXPECT_EQ(l->unicode_compact_data, 56u);
  std::string torn = DebugOffsets313();
  torn[0] = 'X';
  EXPECT_NE(agent::LayoutFromDebugOffsets(torn).status().message().find("no _Py_DebugOffsets"), std::string::npos);
  std::string later = DebugOffsets313();
  later[10] = 14;  // 3.14: another layout of the block itself
  EXPECT_NE(agent::LayoutFromDebugOffsets(later).status().message().find("version 3.14"), std::string::npos);
  std::string wild = DebugOffsets313();
  wild[296 + 5] = 1;  // a qualname offset in the terabytes
  EXPECT_NE(agent::LayoutFromDebugOffsets(wild).status().message().find("unreadable"), std::string::npos);
  std::string free_threaded = DebugOffsets313();
  free_threaded[16] = 1;
  EXPECT_NE(agent::LayoutFromDebugOffsets(free_threaded).status().message().find("free-threaded"), std::string::npos);
}

TEST(PythonReader, AProcessThatDiesMidWalkGivesTheFramesReadSoFar) {
  testing::PythonImage img = testing::BuildPython311Image();
  auto r = agent::PythonReader::Open(&img.mem, img.runtime, testing::PythonImage::kVersion);
  ASSERT_TRUE(r.ok());
  const uint64_t main = r->ThreadStates()->at(testing::PythonImage::kMainTid);
  // Enough reads for the thread state and the first frame, then nothing.
  for (int64_t reads = 0; reads < 40; ++reads) {
    img.mem.reads_left = reads;
    agent::PythonThread t = r->Frames(main);
    if (t.frames.size() == 3 && t.error.empty()) continue;  // the cached names need fewer reads
    EXPECT_FALSE(t.error.empty()) << reads << " reads: " << t.frames.size() << " frames and no error";
    EXPECT_LT(t.frames.size(), 3u);
  }
  img.mem.reads_left = -1;
  EXPECT_EQ(r->Frames(main).frames.size(), 3u);
}

// A fuzz-style run over random corruptions of the image: torn pointers,
// lengths and tables give partial results with an error, never a crash, an
// endless walk or text that is not one line of UTF-8.
TEST(PythonReader, RandomCorruptionsGivePartialResultsNeverACrash) {
  std::mt19937_64 rng(25);
  int partial = 0;
  for (int round = 0; round < 3000; ++round) {
    testing::PythonImage img = testing::BuildPython311Image();
    std::string& b = img.mem.bytes;
    const int edits = 1 + static_cast<int>(rng() % 8);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % b.size();
      switch (rng() % 3) {
        case 0: b[at] = static_cast<char>(rng()); break;  // a byte
        case 1: {                                         // a pointer into the image, misaligned or not
          const uint64_t p = testing::FakeMemory::kBase + rng() % b.size();
          std::memcpy(&b[at - at % 8], &p, std::min<size_t>(8, b.size() - (at - at % 8)));
          break;
        }
        default: {  // a huge value
          const uint64_t v = rng();
          std::memcpy(&b[at - at % 8], &v, std::min<size_t>(8, b.size() - (at - at % 8)));
        }
      }
    }
    auto r = agent::PythonReader::Open(&img.mem, img.runtime, testing::PythonImage::kVersion);
    ASSERT_TRUE(r.ok());
    auto threads = r->ThreadStates();
    if (!threads.ok()) continue;
    ASSERT_LE(threads->size(), static_cast<size_t>(agent::PythonReader::kMaxThreads));
    for (const auto& [tid, tstate] : *threads) {
      agent::PythonThread t = r->Frames(tstate);
      partial += !t.error.empty();
      ASSERT_LE(t.frames.size(), static_cast<size_t>(agent::PythonReader::kMaxFrames));
      std::vector<agent::StackFrame> native = {{1, "clock_nanosleep", false}, {2, "_PyEval_EvalFrameDefault", false},
                                               {3, "main", false}};
      std::vector<agent::StackFrame> merged = agent::SpliceFrames(native, t);
      ASSERT_EQ(merged.size(), native.size() - (t.frames.empty() ? 0 : 1) + t.frames.size());
      for (const agent::PythonFrame& f : t.frames) {
        ASSERT_TRUE(ValidUtf8WithoutControls(agent::PythonFrameName(f))) << agent::PythonFrameName(f);
      }
    }
  }
  EXPECT_GT(partial, 0) << "no corruption was noticed: the test corrupts nothing the reader reads";
}

TEST(PythonReader, EachEvaluationLoopTakesTheFramesUpToItsEntryFrame) {
  agent::PythonThread py;
  py.frames = {{"c", "f.py", 3, false}, {"b", "f.py", 2, true}, {"a", "f.py", 1, true}};
  auto names = [](const std::vector<agent::StackFrame>& fs) {
    std::string s;
    for (const auto& f : fs) s += (s.empty() ? "" : " < ") + f.name;
    return s;
  };
  EXPECT_EQ(names(agent::SpliceFrames({{1, "sleep", false}, {2, "_PyEval_EvalFrameDefault", false},
                                       {3, "PyObject_Call", false}, {4, "_PyEval_EvalFrameDefault", false},
                                       {5, "main", false}},
                                      py)),
            "sleep < c (f.py:3) < b (f.py:2) < PyObject_Call < a (f.py:1) < main");
  // Fewer evaluation loops than entry frames: the last takes the rest.
  EXPECT_EQ(names(agent::SpliceFrames({{1, "sleep", false}, {2, "_PyEval_EvalFrameDefault", false}, {5, "main", false}},
                                      py)),
            "sleep < c (f.py:3) < b (f.py:2) < a (f.py:1) < main");
  // None (an unwind cut short): the Python frames follow the native ones.
  EXPECT_EQ(names(agent::SpliceFrames({{1, "sleep", false}}, py)), "sleep < c (f.py:3) < b (f.py:2) < a (f.py:1)");
  // No Python frames: the native stack as it was.
  EXPECT_EQ(names(agent::SpliceFrames({{2, "_PyEval_EvalFrameDefault", false}}, agent::PythonThread{})),
            "_PyEval_EvalFrameDefault");
}

// --- any program, and a tool that overruns -------------------------------

// The tracer works on any program, not only bulwark-train: a shell's
// `sleep` child here, captured from outside with libdw, in-process
// (tracer_test.cc compares it with eu-stack).
TEST(Tracer, CapturesEveryThreadOfAnyProcess) {
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::execlp("sleep", "sleep", "30", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Wait until it sleeps (nanosleep 35 or clock_nanosleep 230 in
  // /proc/PID/syscall): a loaded host can still be starting it after any
  // fixed pause, and its stack then has no nanosleep yet.
  for (int i = 0; i < 500; ++i) {
    std::ifstream sc("/proc/" + std::to_string(child) + "/syscall");
    std::string nr;
    sc >> nr;
    if (nr == "35" || nr == "230") break;
    ::usleep(10 * 1000);
  }
  Result<agent::CapturedStack> st = agent::CaptureStacks(child, std::chrono::milliseconds(5000));
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->tool, "libdw");
  EXPECT_NE(st->text.find("TID " + std::to_string(child)), std::string::npos) << st->text;
  EXPECT_NE(st->text.find("nanosleep"), std::string::npos) << st->text;
  std::printf("[ timing ] libdw on sleep: %.0f ms\n", st->ms);
  // A process that is gone: a clear error, not a hang.
  Result<agent::CapturedStack> gone = agent::CaptureStacks(child, std::chrono::milliseconds(3000));
  EXPECT_FALSE(gone.ok());
  EXPECT_NE(gone.status().message().find(std::to_string(child)), std::string::npos) << gone.status().message();
}

TEST(Tracer, AToolThatOverrunsItsBudgetIsKilled) {
  int code = 0;
  const auto t0 = std::chrono::steady_clock::now();
  Result<std::string> r = agent::RunCaptured({"sleep", "10"}, std::chrono::milliseconds(300), &code);
  EXPECT_FALSE(r.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

}  // namespace
}  // namespace bulwark
