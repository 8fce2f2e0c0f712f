#include "common/process_memory.h"

#include <cstring>
#include <memory>

#include <gtest/gtest.h>

namespace kvtier {
namespace {

// A sanitizer's allocator replaces glibc's: mallinfo2 then sees none of the heap.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kGlibcHeap = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
constexpr bool kGlibcHeap = false;
#else
constexpr bool kGlibcHeap = true;
#endif
#else
constexpr bool kGlibcHeap = true;
#endif

TEST(ProcessMemoryTest, AnAllocationInUseCountsAndFreedMemoryLeavesTheInUseCount) {
  if (!kGlibcHeap) GTEST_SKIP() << "a sanitizer's allocator, not glibc's";
  const ProcessMemory before = ReadProcessMemory();
  EXPECT_GT(before.resident_bytes, 0u);
  constexpr size_t kBytes = size_t{64} << 20;
  auto block = std::make_unique<char[]>(kBytes);
  std::memset(block.get(), 1, kBytes);  // touched: resident
  const ProcessMemory held = ReadProcessMemory();
  EXPECT_GE(held.heap_in_use_bytes, before.heap_in_use_bytes + kBytes);
  EXPECT_GE(held.resident_bytes, before.resident_bytes + kBytes / 2);
  block.reset();
  const ProcessMemory after = ReadProcessMemory();
  EXPECT_LT(after.heap_in_use_bytes, held.heap_in_use_bytes - kBytes / 2);
}

TEST(ProcessMemoryTest, MetricsShowTheSampledValues) {
  MetricsRegistry registry;
  auto metrics = ProcessMemoryMetrics::Create(registry).value();
  metrics->Update();
  const std::string text = registry.Exposition();
  EXPECT_NE(text.find("process_resident_memory_bytes "), std::string::npos) << text;
  EXPECT_NE(text.find("kvtier_process_heap_bytes{state=\"in_use\"} "), std::string::npos) << text;
  EXPECT_NE(text.find("kvtier_process_heap_bytes{state=\"free\"} "), std::string::npos) << text;
  EXPECT_EQ(text.find("process_resident_memory_bytes 0\n"), std::string::npos)
      << "sampled, not left at 0";
}

}  // namespace
}  // namespace kvtier
