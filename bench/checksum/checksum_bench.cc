// Checksum64 (src/common/checksum.h, hand-written) against xxHash's XXH3 on
// the in-memory checkpoint path: one shard-sized buffer, hashed in one call
// and copied-and-hashed in 128 KiB blocks the way WriteShardImage does.
//
//   bulwark-checksum-bench [MB] [repetitions]     (default 27 MB, 21)
//
// Prints the median and best GB/s of each, over wall time and over this
// thread's CPU time: on a host shared with other work the wall figures
// include time the bench was not scheduled, the CPU figures do not. XXH3 is taken twice: the SSE2
// build every x86_64 runs, and the library's runtime dispatch (AVX2 or
// AVX-512 where present), which is what bulwark links.
#include <xxh_x86dispatch.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/checksum.h"

namespace {

constexpr size_t kBlock = 128 << 10;  // as src/rank_client/shard_image.cc

struct Contender {
  Contender(const char* name, std::function<uint64_t()> run) : name(name), run(std::move(run)) {}
  const char* name;
  std::function<uint64_t()> run;  // returns the digest
  uint64_t digest = 0;
  std::vector<double> gbs, cpu_gbs;
};

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Interleaves the contenders: repetition i runs each once, in turn, so a
// burst of load from other processes on a shared host hits all of them
// rather than whichever happened to be running.
void RunAll(std::vector<Contender>& cs, size_t bytes, int reps) {
  for (auto& c : cs) c.digest = c.run();  // warm-up: page faults and caches out of the figures
  for (int i = 0; i < reps; ++i) {
    for (auto& c : cs) {
      const double c0 = ThreadCpuSeconds();
      auto t0 = std::chrono::steady_clock::now();
      uint64_t d = c.run();
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double cpu = ThreadCpuSeconds() - c0;
      if (d != c.digest) {
        std::fprintf(stderr, "%s: digest changed between runs: the bench is broken\n", c.name);
        std::exit(1);
      }
      c.gbs.push_back(bytes / s / 1e9);
      c.cpu_gbs.push_back(bytes / cpu / 1e9);
    }
  }
  for (auto& c : cs) {
    std::sort(c.gbs.begin(), c.gbs.end());
    std::sort(c.cpu_gbs.begin(), c.cpu_gbs.end());
    std::printf("  %-32s wall: median %6.2f best %6.2f worst %6.2f GB/s | cpu: median %6.2f GB/s | %s\n", c.name,
                c.gbs[c.gbs.size() / 2], c.gbs.back(), c.gbs.front(), c.cpu_gbs[c.cpu_gbs.size() / 2],
                bulwark::Hex64(c.digest).c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  const size_t mb = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 27;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 21;
  if (mb < 1 || reps < 1) {
    std::fprintf(stderr, "usage: bulwark-checksum-bench [MB >= 1] [repetitions >= 1]\n");
    return 2;
  }
  const size_t n = mb * 1000 * 1000;
  std::vector<uint8_t> src(n), dst(n);
  std::mt19937_64 rng(42);
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint64_t v = rng();
    std::memcpy(&src[i], &v, 8);
  }
  std::memset(dst.data(), 1, n);
  std::printf("checksum bench: %zu MB buffer, %d repetitions (after one warm-up)\n", mb, reps);

  std::printf("hash only (one call over the buffer):\n");
  std::vector<Contender> hash = {
      {"Checksum64", [&] { return bulwark::Checksum64(src.data(), n); }},
      {"XXH3_64bits (SSE2)", [&] { return uint64_t{XXH3_64bits(src.data(), n)}; }},
      {"XXH3_64bits_dispatch", [&] { return uint64_t{XXH3_64bits_dispatch(src.data(), n)}; }},
      {"memcpy alone (for scale)", [&] {
         std::memcpy(dst.data(), src.data(), n);
         return uint64_t{dst[n / 2]};
       }},
  };
  RunAll(hash, n, reps);

  std::printf("copy + hash in 128 KiB blocks (the shard image writer):\n");
  XXH3_state_t* st = XXH3_createState();
  std::vector<Contender> copy = {
      {"memcpy + Checksum (streaming)", [&] {
         bulwark::Checksum c;
         for (size_t at = 0; at < n; at += kBlock) {
           size_t k = std::min(kBlock, n - at);
           std::memcpy(&dst[at], &src[at], k);
           c.Update(&dst[at], k);
         }
         return c.Digest();
       }},
      {"memcpy + XXH3 update (dispatch)", [&] {
         XXH3_64bits_reset(st);
         for (size_t at = 0; at < n; at += kBlock) {
           size_t k = std::min(kBlock, n - at);
           std::memcpy(&dst[at], &src[at], k);
           XXH3_64bits_update_dispatch(st, &dst[at], k);
         }
         return uint64_t{XXH3_64bits_digest(st)};
       }},
  };
  RunAll(copy, n, reps);
  XXH3_freeState(st);
  return 0;
}
