// The main() that lets a libFuzzer harness build with GCC and run in CTest,
// where no clang is installed: it feeds every file it is given (a directory
// means every regular file in it) through LLVMFuzzerTestOneInput, then, with
// --mutate N, feeds N mutants of those files (byte flips, inserts, deletes,
// splices) from a fixed seed, so the smoke run in `make test` reaches past
// the seeds yet fails the same way every time.
//
//   fuzz_job_file fuzz/corpus/job_file fuzz/regressions/job_file --mutate 20000
//
// A crash (a fatal signal, or an uncaught exception that aborts) first
// writes the input that caused it to ./fuzz-crash-<harness>, the file to add
// under fuzz/regressions/ once the parser is fixed. `make fuzz` replaces this
// driver with libFuzzer's own (fuzz/run.sh).
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

// The input being run, for the crash handler: set before every call.
const std::string* g_current = nullptr;
char g_crash_path[256] = "fuzz-crash";

// Async-signal-safe: only open, write, close and the default action.
void OnFatalSignal(int sig) {
  if (g_current != nullptr) {
    int fd = open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ssize_t ignored = write(fd, g_current->data(), g_current->size());
      (void)ignored;
      close(fd);
    }
    static const char kMsg[] = "replay: crashing input written to ";
    ssize_t ignored = write(2, kMsg, sizeof kMsg - 1);
    ignored = write(2, g_crash_path, strlen(g_crash_path));
    ignored = write(2, "\n", 1);
    (void)ignored;
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

void Run(const std::string& input) {
  g_current = &input;
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  g_current = nullptr;
}

std::string Mutate(const std::vector<std::string>& seeds, std::mt19937_64& rng) {
  std::string s = seeds[rng() % seeds.size()];
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    const size_t at = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 6) {
      case 0:  // flip a bit
        if (!s.empty()) s[at % s.size()] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 1:  // a random byte
        if (!s.empty()) s[at % s.size()] = static_cast<char>(rng());
        break;
      case 2:  // insert random bytes
        s.insert(at, std::string(1 + rng() % 8, static_cast<char>(rng())));
        break;
      case 3:  // delete a run
        if (!s.empty()) s.erase(at % s.size(), 1 + rng() % 16);
        break;
      case 4: {  // splice in a piece of another seed
        const std::string& o = seeds[rng() % seeds.size()];
        if (o.empty()) break;
        const size_t from = rng() % o.size();
        s.insert(at, o.substr(from, 1 + rng() % 64));
        break;
      }
      default:  // an interesting number where parsers read lengths and counts
        if (s.size() >= 8) {
          static const uint64_t kValues[] = {0, 1, 0x7f, 0xff, 0x7fffffff, 0xffffffff, ~0ull, 1ull << 40};
          uint64_t v = kValues[rng() % std::size(kValues)];
          std::memcpy(&s[at % (s.size() - 7)], &v, 8);
        }
        break;
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> paths;
  long mutations = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--mutate") == 0 && i + 1 < argc) {
      mutations = std::atol(argv[++i]);
      continue;
    }
    std::error_code ec;
    if (std::filesystem::is_directory(argv[i], ec)) {
      for (const auto& e : std::filesystem::directory_iterator(argv[i])) {
        if (e.is_regular_file()) paths.push_back(e.path().string());
      }
    } else {
      paths.push_back(argv[i]);
    }
  }
  std::sort(paths.begin(), paths.end());  // directory order is not stable

  std::snprintf(g_crash_path, sizeof g_crash_path, "fuzz-crash-%s",
                std::filesystem::path(argv[0]).filename().c_str());
  for (int sig : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL}) signal(sig, OnFatalSignal);

  std::vector<std::string> seeds;
  for (const std::string& p : paths) {
    std::ifstream in(p, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "replay: cannot read %s\n", p.c_str());
      return 2;
    }
    seeds.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    Run(seeds.back());
  }
  std::printf("replay: %zu inputs ran\n", seeds.size());
  if (mutations > 0 && !seeds.empty()) {
    std::mt19937_64 rng(0xb01fa4c);
    const auto start = std::chrono::steady_clock::now();
    for (long i = 0; i < mutations; ++i) Run(Mutate(seeds, rng));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("replay: %ld mutants ran in %.2f s\n", mutations, s);
  }
  return 0;
}
