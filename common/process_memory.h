// ProcessMemory: how much memory this process holds, and how much of it the heap is using.
//
// RSS alone cannot tell a leak from memory the allocator keeps: every kvtier binary keeps
// freed heap memory up to 1 GiB on purpose (malloc_tuning.h), so RSS holds the heap's
// high-water mark. glibc's mallinfo2 (summed over its arenas) says what is in use and what
// is free but kept, which tells them apart.
//
//   process_resident_memory_bytes      gauge  RSS (the Prometheus convention's name)
//   kvtier_process_heap_bytes{state}   gauge  "in_use" (arenas' and mmapped chunks) and
//                                             "free" (kept by the allocator, not in use)
//
// Thread safety: ReadProcessMemory is safe from any thread; ProcessMemoryMetrics::Update
// too (it sets gauges).
#pragma once

#include <cstdint>
#include <memory>

#include "common/metrics.h"
#include "common/status.h"

namespace kvtier {

struct ProcessMemory {
  uint64_t resident_bytes = 0;
  uint64_t heap_in_use_bytes = 0;
  uint64_t heap_free_bytes = 0;
};

ProcessMemory ReadProcessMemory();

class ProcessMemoryMetrics {
 public:
  // kAlreadyExists when the registry has these names already.
  [[nodiscard]] static Result<std::unique_ptr<ProcessMemoryMetrics>> Create(
      MetricsRegistry& registry);
  // Samples the process's memory into the gauges (a scrape calls it first).
  void Update();

 private:
  ProcessMemoryMetrics() = default;
  Gauge* resident_ = nullptr;
  Gauge* in_use_ = nullptr;
  Gauge* free_ = nullptr;
};

}  // namespace kvtier
