// Clang thread-safety annotations (no-ops under other compilers).
//
// Shared state is annotated with the mutex that guards it, so that the intended locking is
// written down next to the data and clang's -Wthread-safety checks it: the ASan tree
// (`make test-asan`, part of CI) is built with clang and fails on a violation. The
// mutexes themselves are kvtier::Mutex and kvtier::SharedMutex (common/mutex.h), which
// clang can see; libstdc++'s std::mutex carries no annotations. Lock order for the whole
// project is in docs/architecture.md ("Threads and locks").
#pragma once

#if defined(__clang__)
#define KVTIER_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define KVTIER_THREAD_ANNOTATION(x)
#endif

// On data and functions.
#define KVTIER_GUARDED_BY(x) KVTIER_THREAD_ANNOTATION(guarded_by(x))
#define KVTIER_PT_GUARDED_BY(x) KVTIER_THREAD_ANNOTATION(pt_guarded_by(x))
#define KVTIER_REQUIRES(...) KVTIER_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define KVTIER_EXCLUDES(...) KVTIER_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
// On a mutex member: the class's other mutexes that must already be held, where held at
// all, when this one is taken. Clang checks it under -Wthread-safety-beta, within one
// class (a member cannot name another object's mutex), so the cross-class order stays in
// docs/architecture.md.
#define KVTIER_ACQUIRED_AFTER(...) KVTIER_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))

// On the lock types of common/mutex.h.
#define KVTIER_CAPABILITY(x) KVTIER_THREAD_ANNOTATION(capability(x))
#define KVTIER_SCOPED_CAPABILITY KVTIER_THREAD_ANNOTATION(scoped_lockable)
#define KVTIER_ACQUIRE(...) KVTIER_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define KVTIER_ACQUIRE_SHARED(...) KVTIER_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define KVTIER_RELEASE(...) KVTIER_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define KVTIER_ASSERT_CAPABILITY(x) KVTIER_THREAD_ANNOTATION(assert_capability(x))
