#include "trainer/diag/pace.h"

#include <sys/stat.h>
#include <time.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>

namespace bulwark::trainer {
namespace {

double ClockMs(clockid_t id) {
  timespec ts{};
  ::clock_gettime(id, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

int64_t MonotonicNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::optional<PaceFile> PaceFile::FromEnv() {
  const char* f = std::getenv("BULWARK_PACE_FILE");
  if (f == nullptr || *f == '\0') return std::nullopt;
  PaceFile p;
  p.path_ = f;
  p.Poll();
  return p;
}

void PaceFile::Poll() {
  struct stat st;
  const int64_t ns = ::stat(path_.c_str(), &st) != 0
                         ? -2
                         : static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  if (ns == seen_ns_) return;
  seen_ns_ = ns;
  double f = 1;
  if (ns != -2) {
    std::ifstream in(path_);
    in >> f;
    if (!in || !(f > 1) || f > 1000) f = 1;
  }
  factor_ = f;
}

double ProcessCpuMs() { return ClockMs(CLOCK_PROCESS_CPUTIME_ID); }

void StepCompute::Begin() {
  cpu0_ = ProcessCpuMs();
  wall0_ns_ = MonotonicNs();
}

double StepCompute::Ms(double wait_ms) const {
  if (cpu_) return ProcessCpuMs() - cpu0_;  // a blocked wait uses no CPU
  return static_cast<double>(MonotonicNs() - wall0_ns_) / 1e6 - wait_ms;
}

void StepCompute::Stretch(double factor, double wait_ms) const {
  if (!(factor > 1)) return;
  const double extra = (factor - 1) * Ms(wait_ms);
  if (cpu_) {
    BurnCpuMs(extra);
  } else {
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(extra));
  }
}

void BurnCpuMs(double ms) {
  const double until = ClockMs(CLOCK_THREAD_CPUTIME_ID) + ms;
  while (ClockMs(CLOCK_THREAD_CPUTIME_ID) < until) {
    for (volatile int i = 0; i < 1000; ++i) {
    }
  }
}

}  // namespace bulwark::trainer
