#pragma once
// Clang thread-safety annotations (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html), and a
// mutex and scoped lock that carry them, so that "guarded by mutex_" is checked by the compiler
// (clang's -Wthread-safety) instead of by reviewers. Under other compilers the annotations expand
// to nothing and Mutex and MutexLock are plain std::mutex and std::unique_lock.
//
// Thread safety: Mutex is a std::mutex. MutexLock, like std::unique_lock, belongs to the thread
// that made it. Ownership: a MutexLock holds its mutex from construction to destruction, except
// between an Unlock and the next Lock; the mutex must outlive it. Errors: none beyond std::mutex's.
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define GRAPHSERVE_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define GRAPHSERVE_THREAD_ANNOTATION(x)
#endif

// A type that is a capability (a mutex), named in the analysis's messages.
#define CAPABILITY(name) GRAPHSERVE_THREAD_ANNOTATION(capability(name))
// An RAII type that holds a capability for its lifetime.
#define SCOPED_CAPABILITY GRAPHSERVE_THREAD_ANNOTATION(scoped_lockable)
// gRPC's headers bring in Abseil's legacy base/internal/thread_annotations.h, which defines
// GUARDED_BY, PT_GUARDED_BY and NO_THREAD_SAFETY_ANALYSIS as the same attributes: whichever header
// comes first defines them, without a redefinition warning either way.
// A data member read or written only while the capability is held.
#ifndef GUARDED_BY
#define GUARDED_BY(x) GRAPHSERVE_THREAD_ANNOTATION(guarded_by(x))
#endif
// A pointer member whose pointee is accessed only while the capability is held.
#ifndef PT_GUARDED_BY
#define PT_GUARDED_BY(x) GRAPHSERVE_THREAD_ANNOTATION(pt_guarded_by(x))
#endif
// A function called only with the capability held (and returning with it held).
#define REQUIRES(...) GRAPHSERVE_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
// A function that acquires or releases the capability, or with no argument, the one of `this`.
#define ACQUIRE(...) GRAPHSERVE_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) GRAPHSERVE_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) GRAPHSERVE_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
// A function called only without the capability held (it takes it itself).
#define EXCLUDES(...) GRAPHSERVE_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
// A function that returns a reference to the capability.
#define RETURN_CAPABILITY(x) GRAPHSERVE_THREAD_ANNOTATION(lock_returned(x))
// Tells the analysis that the capability is held here (checked by nothing at run time).
#define ASSERT_CAPABILITY(x) GRAPHSERVE_THREAD_ANNOTATION(assert_capability(x))
// Turns the analysis off for one function, for locking it cannot follow; say why at each use.
#ifndef NO_THREAD_SAFETY_ANALYSIS
#define NO_THREAD_SAFETY_ANALYSIS GRAPHSERVE_THREAD_ANNOTATION(no_thread_safety_analysis)
#endif

namespace graphserve {

// A std::mutex the analysis knows as a capability.
class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mutex_.lock(); }
  void Unlock() RELEASE() { mutex_.unlock(); }
  bool TryLock() TRY_ACQUIRE(true) { return mutex_.try_lock(); }

 private:
  friend class MutexLock;
  std::mutex mutex_;
};

// Holds a Mutex from construction to destruction, like std::unique_lock, and can be waited on with
// a std::condition_variable (Wait, or native() for the waits that take a std::unique_lock).
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mutex) ACQUIRE(mutex) : lock_(mutex->mutex_) {}
  ~MutexLock() RELEASE() = default;

  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // For the stretches that run without the lock (callbacks, batch execution) inside its scope.
  void Unlock() RELEASE() { lock_.unlock(); }
  void Lock() ACQUIRE() { lock_.lock(); }

  // Releases the mutex while waiting and holds it again on return, as the analysis assumes. No
  // predicate overload: the analysis checks a lambda as a function of its own, without the lock, so
  // callers loop on their condition instead.
  void Wait(std::condition_variable& condition) { condition.wait(lock_); }

  // The underlying lock, for APIs that take a std::unique_lock (Clock::WaitUntil). The caller must
  // return it locked.
  std::unique_lock<std::mutex>& native() { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace graphserve
