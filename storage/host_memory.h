// HostMemory: the slab of host RAM that backs a host tier.
//
// An anonymous private mapping, page-aligned, populated up front so that a full tier
// never faults. Huge pages are used when the system has them: first an explicit
// MAP_HUGETLB mapping (reserved 2 MiB pages), else transparent huge pages requested with
// madvise. When CUDA is present the owner pins the slab through `pin` (for example
// cudaHostRegister, injected by the service that knows about GPUs; storage/ never
// includes gpu/), so device copies into and out of it run at full DMA speed.
//
// Thread safety: immutable after Create; the bytes are the owner's to synchronise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "common/status.h"

namespace kvtier::storage {

struct HostMemoryOptions {
  size_t bytes = 0;
  bool try_huge_pages = true;
  bool populate = true;  // touch every page now (MAP_POPULATE)
  // Called once after mapping; an error fails Create. `unpin` is called before unmapping.
  std::function<Status(void* data, size_t bytes)> pin;
  std::function<void(void* data, size_t bytes)> unpin;
};

class HostMemory {
 public:
  // kInvalidArgument for zero bytes; kResourceExhausted when the kernel refuses the mapping.
  [[nodiscard]] static Result<std::unique_ptr<HostMemory>> Create(HostMemoryOptions options);
  ~HostMemory();
  HostMemory(const HostMemory&) = delete;
  HostMemory& operator=(const HostMemory&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool explicit_huge_pages() const { return explicit_huge_pages_; }
  bool pinned() const { return pinned_; }

 private:
  HostMemory(uint8_t* data, size_t size, bool explicit_huge_pages, HostMemoryOptions options)
      : data_(data),
        size_(size),
        explicit_huge_pages_(explicit_huge_pages),
        options_(std::move(options)) {}

  uint8_t* data_;
  size_t size_;
  bool explicit_huge_pages_;
  bool pinned_ = false;
  HostMemoryOptions options_;
};

}  // namespace kvtier::storage
