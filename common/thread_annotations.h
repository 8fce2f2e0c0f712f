// Clang thread-safety annotations (no-ops under other compilers).
//
// Shared state is annotated with the mutex that guards it, so that the intended locking is
// written down next to the data and clang's -Wthread-safety can check it. Lock order for
// the whole project is in docs/architecture.md ("Threads and locks").
#pragma once

#if defined(__clang__)
#define KVTIER_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define KVTIER_THREAD_ANNOTATION(x)
#endif

#define KVTIER_GUARDED_BY(x) KVTIER_THREAD_ANNOTATION(guarded_by(x))
#define KVTIER_PT_GUARDED_BY(x) KVTIER_THREAD_ANNOTATION(pt_guarded_by(x))
#define KVTIER_REQUIRES(...) KVTIER_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define KVTIER_EXCLUDES(...) KVTIER_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
