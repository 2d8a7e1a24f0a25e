// The rank's communication phase, one word in its shard region's header
// (ShardRegion::phase_word): the trainer says when it enters and leaves a
// collective, and the agent paces its pushes of the rank's backups by it
// (agent/shard_pace.h). A futex on the shared word lets the agent sleep until
// the phase changes instead of polling it.
//
// 0 (kPhaseUnknown) is what a fresh region holds: a writer that never says
// (the Python client, an older trainer) is never paced.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdint>

namespace bulwark::client {

constexpr uint32_t kPhaseUnknown = 0;
constexpr uint32_t kPhaseComputing = 1;
constexpr uint32_t kPhaseCommunicating = 2;

inline uint32_t LoadPhase(const uint32_t* word) { return __atomic_load_n(word, __ATOMIC_ACQUIRE); }

// Sets the phase and wakes a waiting agent. The futex is the shared kind
// (not FUTEX_PRIVATE_FLAG): waiter and waker are different processes mapping
// the same memfd. Two calls a step, a syscall each: nothing beside a step.
inline void StorePhase(uint32_t* word, uint32_t phase) {
  if (__atomic_exchange_n(word, phase, __ATOMIC_RELEASE) == phase) return;
  ::syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// Sleeps while the word holds `phase`, at most `timeout`; returns the phase
// it found last. Spurious wakeups just return early: callers loop.
inline uint32_t WaitWhilePhase(uint32_t* word, uint32_t phase, std::chrono::nanoseconds timeout) {
  uint32_t now = LoadPhase(word);
  if (now != phase || timeout.count() <= 0) return now;
  timespec ts{static_cast<time_t>(timeout.count() / 1000000000), static_cast<long>(timeout.count() % 1000000000)};
  ::syscall(SYS_futex, word, FUTEX_WAIT, phase, &ts, nullptr, 0);
  return LoadPhase(word);
}

}  // namespace bulwark::client
