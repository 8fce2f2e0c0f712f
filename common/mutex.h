// Mutex, SharedMutex, their scoped locks and CondVar: the standard ones, visible to
// clang's thread-safety analysis.
//
// libstdc++'s std::mutex and std::lock_guard carry no capability annotations, so a
// KVTIER_GUARDED_BY(mu_) on a std::mutex documents but cannot be checked. These thin
// wrappers (each member a single call into the standard type, inlined) let clang's
// -Wthread-safety prove that every access to guarded state holds its lock; the ASan tree
// is built with clang to run that proof (common/thread_annotations.h). Abseil's Mutex
// would do it too, but it is not packaged here; this is the small part of it we need.
//
//   Mutex mu_;
//   int count_ KVTIER_GUARDED_BY(mu_);
//   CondVar changed_;
//   ...
//   MutexLock lock(mu_);
//   changed_.Wait(lock, [&]() KVTIER_REQUIRES(mu_) { return count_ > 0; });
//
// A lambda is a function of its own to the analysis. A CondVar predicate, or a lambda
// passed as a std::function, says what it requires, as above (the standard library calls
// it, unchecked); a lambda that a template of ours calls under the caller's lock says
// AssertHeld() instead, as that call is checked.
//
// Thread safety: as the standard types. Ownership: a lock borrows its mutex, which must
// outlive it; a CondVar waits with a MutexLock on whatever Mutex that lock holds.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>
#include <utility>

#include "common/thread_annotations.h"

namespace kvtier {

class KVTIER_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  // Also inside a MutexLock's scope, in a function that REQUIRES this mutex, to let it go
  // for a while: Unlock, then Lock again before the function returns.
  void Lock() KVTIER_ACQUIRE() { mu_.lock(); }
  void Unlock() KVTIER_RELEASE() { mu_.unlock(); }
  // Tells the analysis that the calling thread holds this mutex where it cannot see it:
  // in a lambda that a template of ours calls while the caller holds the lock. It checks
  // nothing at run time (std::mutex cannot say who holds it).
  void AssertHeld() const KVTIER_ASSERT_CAPABILITY(this) {}

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds `mu` from construction to destruction, but between Unlock() and Lock().
class KVTIER_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) KVTIER_ACQUIRE(mu) : lock_(mu.mu_) {}
  ~MutexLock() KVTIER_RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // REQUIRES: held (Lock: not held).
  void Unlock() KVTIER_RELEASE() { lock_.unlock(); }
  void Lock() KVTIER_ACQUIRE() { lock_.lock(); }

 private:
  friend class CondVar;
  std::unique_lock<std::mutex> lock_;
};

// A std::condition_variable waited on with a MutexLock, always for a condition (which
// spurious wake-ups make necessary anyway). REQUIRES (every Wait): `lock` holds its
// mutex; it holds it again when the wait returns.
class CondVar {
 public:
  template <typename Predicate>
  void Wait(MutexLock& lock, Predicate done) {
    cv_.wait(lock.lock_, std::move(done));
  }
  // Returns done() as last seen: false when `timeout` passed first.
  template <typename Rep, typename Period, typename Predicate>
  bool WaitFor(MutexLock& lock, std::chrono::duration<Rep, Period> timeout, Predicate done) {
    return cv_.wait_for(lock.lock_, timeout, std::move(done));
  }

  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

// A reader-writer mutex: many ReaderLocks or one WriterLock at a time.
class KVTIER_CAPABILITY("shared mutex") SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

 private:
  friend class ReaderLock;
  friend class WriterLock;
  std::shared_mutex mu_;
};

class KVTIER_SCOPED_CAPABILITY ReaderLock {
 public:
  explicit ReaderLock(SharedMutex& mu) KVTIER_ACQUIRE_SHARED(mu) : lock_(mu.mu_) {}
  ~ReaderLock() KVTIER_RELEASE() {}
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  std::shared_lock<std::shared_mutex> lock_;
};

class KVTIER_SCOPED_CAPABILITY WriterLock {
 public:
  explicit WriterLock(SharedMutex& mu) KVTIER_ACQUIRE(mu) : lock_(mu.mu_) {}
  ~WriterLock() KVTIER_RELEASE() {}
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  std::unique_lock<std::shared_mutex> lock_;
};

}  // namespace kvtier
