#include "common/malloc_tuning.h"

#include <malloc.h>

namespace kvtier {

void KeepLargeAllocationsInTheHeap() {
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

}  // namespace kvtier
