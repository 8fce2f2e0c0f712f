#include "common/process_memory.h"

#include <malloc.h>
#include <unistd.h>

#include <cstdio>

namespace kvtier {

ProcessMemory ReadProcessMemory() {
  ProcessMemory memory;
  if (std::FILE* statm = std::fopen("/proc/self/statm", "r")) {
    unsigned long long pages = 0, resident = 0;  // NOLINT(google-runtime-int): fscanf's type
    if (std::fscanf(statm, "%llu %llu", &pages, &resident) == 2) {
      memory.resident_bytes = resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    }
    std::fclose(statm);
  }
  const struct mallinfo2 heap = mallinfo2();
  memory.heap_in_use_bytes = heap.uordblks + heap.hblkhd;
  memory.heap_free_bytes = heap.fordblks;
  return memory;
}

Result<std::unique_ptr<ProcessMemoryMetrics>> ProcessMemoryMetrics::Create(
    MetricsRegistry& registry) {
  std::unique_ptr<ProcessMemoryMetrics> m(new ProcessMemoryMetrics());
  KVTIER_ASSIGN_OR_RETURN(
      GaugeFamily * resident,
      registry.AddGauge("process_resident_memory_bytes", "Resident memory of the process."));
  KVTIER_ASSIGN_OR_RETURN(
      GaugeFamily * heap,
      registry.AddGauge("kvtier_process_heap_bytes",
                        "Heap memory in use, and free but kept by the allocator.", {"state"}));
  m->resident_ = &resident->WithLabels({});
  m->in_use_ = &heap->WithLabels({"in_use"});
  m->free_ = &heap->WithLabels({"free"});
  return m;
}

void ProcessMemoryMetrics::Update() {
  const ProcessMemory memory = ReadProcessMemory();
  resident_->Set(static_cast<double>(memory.resident_bytes));
  in_use_->Set(static_cast<double>(memory.heap_in_use_bytes));
  free_->Set(static_cast<double>(memory.heap_free_bytes));
}

}  // namespace kvtier
