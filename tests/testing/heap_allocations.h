// Counting heap allocations, for tests that hold a hot path to no allocation per block.
//
// Including this header replaces the global operator new (every form) with one that
// counts, process-wide: every thread's allocations, the test's and the nodes' it runs.
// Include it in exactly one source file of a test binary (the replacement operators are
// defined here, and a program may define them only once), and in no library.
//
// Thread safety: the count is an atomic; read it from any thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <new>
#include <vector>

namespace kvtier::testing {

namespace heap_allocations_detail {

inline std::atomic<uint64_t> count{0};

inline void* Allocate(std::size_t bytes, std::size_t alignment) {
  count.fetch_add(1, std::memory_order_relaxed);
  bytes = std::max<std::size_t>(bytes, 1);
  if (alignment <= alignof(std::max_align_t)) return std::malloc(bytes);
  return std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
}

inline void* AllocateOrThrow(std::size_t bytes, std::size_t alignment) {
  if (void* p = Allocate(bytes, alignment)) return p;
  throw std::bad_alloc();
}

}  // namespace heap_allocations_detail

// Allocations made so far by the whole process.
inline uint64_t HeapAllocations() {
  return heap_allocations_detail::count.load(std::memory_order_relaxed);
}

// The fewest allocations any of `rounds` calls of `work(round)` made: a background
// allocation of a node's (a timer, a metric, a heartbeat) lands in some rounds, not all.
template <typename Fn>
uint64_t FewestAllocations(int rounds, Fn&& work) {
  uint64_t fewest = std::numeric_limits<uint64_t>::max();
  for (int round = 0; round < rounds; ++round) {
    const uint64_t before = HeapAllocations();
    work(round);
    fewest = std::min(fewest, HeapAllocations() - before);
  }
  return fewest;
}

// The median of counts taken over several rounds: unlike the fewest, neither a round that
// caught a background allocation nor one that missed one of its own moves it.
inline uint64_t MedianAllocations(std::vector<uint64_t> counts) {
  std::nth_element(counts.begin(), counts.begin() + counts.size() / 2, counts.end());
  return counts[counts.size() / 2];
}

}  // namespace kvtier::testing

// The replacements (not inline: the standard forbids it). Sized and aligned deletes free
// as the plain one does: malloc and aligned_alloc memory both go back through free.
void* operator new(std::size_t n) {
  return kvtier::testing::heap_allocations_detail::AllocateOrThrow(n, 0);
}
void* operator new[](std::size_t n) {
  return kvtier::testing::heap_allocations_detail::AllocateOrThrow(n, 0);
}
void* operator new(std::size_t n, std::align_val_t a) {
  return kvtier::testing::heap_allocations_detail::AllocateOrThrow(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return kvtier::testing::heap_allocations_detail::AllocateOrThrow(n, static_cast<std::size_t>(a));
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  return kvtier::testing::heap_allocations_detail::Allocate(n, 0);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return kvtier::testing::heap_allocations_detail::Allocate(n, 0);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
