// A mutex that clang's thread-safety analysis can check (-Wthread-safety,
// `make lint`): fields say which lock guards them (GUARDED_BY), functions
// which lock they need (REQUIRES) or must not hold (EXCLUDES), and a build
// with clang refuses code that reads a guarded field without its lock.
// libstdc++'s std::mutex carries no such annotations, so this wraps one
// (as LevelDB's port::Mutex and Abseil's Mutex do). Under GCC the
// annotations are empty and the classes are std::mutex and its guards.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

// Abseil (under gRPC) defines a few of the same names the same way.
#if defined(__clang__)
#define BULWARK_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define BULWARK_THREAD_ANNOTATION(x)
#endif

#ifndef CAPABILITY
#define CAPABILITY(x) BULWARK_THREAD_ANNOTATION(capability(x))
#endif
#ifndef SCOPED_CAPABILITY
#define SCOPED_CAPABILITY BULWARK_THREAD_ANNOTATION(scoped_lockable)
#endif
#ifndef GUARDED_BY
#define GUARDED_BY(x) BULWARK_THREAD_ANNOTATION(guarded_by(x))
#endif
#ifndef PT_GUARDED_BY
#define PT_GUARDED_BY(x) BULWARK_THREAD_ANNOTATION(pt_guarded_by(x))
#endif
#ifndef ACQUIRED_AFTER
#define ACQUIRED_AFTER(...) BULWARK_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#endif
#ifndef REQUIRES
#define REQUIRES(...) BULWARK_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#endif
#ifndef ACQUIRE
#define ACQUIRE(...) BULWARK_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#endif
#ifndef RELEASE
#define RELEASE(...) BULWARK_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#endif
#ifndef EXCLUDES
#define EXCLUDES(...) BULWARK_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#endif
#ifndef ASSERT_CAPABILITY
#define ASSERT_CAPABILITY(x) BULWARK_THREAD_ANNOTATION(assert_capability(x))
#endif
#ifndef NO_THREAD_SAFETY_ANALYSIS
#define NO_THREAD_SAFETY_ANALYSIS BULWARK_THREAD_ANNOTATION(no_thread_safety_analysis)
#endif

namespace bulwark {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  // Tells the analysis what a caller's contract already guarantees.
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds a Mutex for its scope (std::lock_guard's part).
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// A condition variable over a Mutex the caller holds; it is released while
// waiting and held again on return, as std::condition_variable does.
class CondVar {
 public:
  void NotifyAll() { cv_.notify_all(); }
  void NotifyOne() { cv_.notify_one(); }
  void Wait(Mutex* mu) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();  // still held: the caller's MutexLock unlocks it
  }
  // False when `deadline` passed first.
  template <class Clock, class D>
  bool WaitUntil(Mutex* mu, const std::chrono::time_point<Clock, D>& deadline) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const bool woken = cv_.wait_until(lock, deadline) == std::cv_status::no_timeout;
    lock.release();
    return woken;
  }
  template <class Rep, class Period>
  bool WaitFor(Mutex* mu, const std::chrono::duration<Rep, Period>& d) REQUIRES(mu) {
    return WaitUntil(mu, std::chrono::steady_clock::now() + d);
  }

 private:
  std::condition_variable cv_;
};

}  // namespace bulwark
