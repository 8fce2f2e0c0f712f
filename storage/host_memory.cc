#include "storage/host_memory.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

namespace kvtier::storage {
namespace {

constexpr size_t kHugePageBytes = size_t{2} << 20;

void* Map(size_t bytes, int extra_flags) {
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | extra_flags, -1, 0);
  return data == MAP_FAILED ? nullptr : data;
}

}  // namespace

Result<std::unique_ptr<HostMemory>> HostMemory::Create(HostMemoryOptions options) {
  if (options.bytes == 0) return InvalidArgumentError("host memory size is zero");
  const int populate = options.populate ? MAP_POPULATE : 0;
  bool explicit_huge = false;
  void* data = nullptr;
  size_t size = options.bytes;
  if (options.try_huge_pages) {
    const size_t rounded = (options.bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    data = Map(rounded, MAP_HUGETLB | populate);
    if (data != nullptr) {
      explicit_huge = true;
      size = rounded;
    }
  }
  if (data == nullptr) {
    // No reserved huge pages (the common case): ask for transparent ones before the
    // pages are touched, then populate.
    data = Map(size, 0);
    if (data == nullptr) {
      return ResourceExhaustedError("cannot map " + std::to_string(size) +
                                    " bytes of host memory: " + std::strerror(errno));
    }
    if (options.try_huge_pages) madvise(data, size, MADV_HUGEPAGE);  // advisory; failure is fine
    if (options.populate)
      madvise(data, size, MADV_POPULATE_WRITE);  // Linux 5.14+; else first touch faults
  }
  std::unique_ptr<HostMemory> memory(
      new HostMemory(static_cast<uint8_t*>(data), size, explicit_huge, std::move(options)));
  if (memory->options_.pin) {
    Status pinned = memory->options_.pin(memory->data_, memory->size_);
    if (!pinned.ok()) return pinned.WithContext("pinning host memory");
    memory->pinned_ = true;
  }
  return memory;
}

HostMemory::~HostMemory() {
  if (pinned_ && options_.unpin) options_.unpin(data_, size_);
  munmap(data_, size_);
}

}  // namespace kvtier::storage
