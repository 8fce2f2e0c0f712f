// Test helpers: small host tiers of 4 KiB pages, whose page counts a test can reason about.
#pragma once

#include <cstdint>

#include "storage/host_tier.h"

namespace kvtier::storage::testing {

inline constexpr uint32_t kTestPageBytes = 4096;

// A host tier of `pages` pages of kTestPageBytes, in ordinary memory (no huge pages).
inline HostTierOptions SmallHostTier(uint64_t pages) {
  HostTierOptions options;
  options.capacity_bytes = pages * kTestPageBytes;
  options.page_bytes = kTestPageBytes;
  options.try_huge_pages = false;
  return options;
}

}  // namespace kvtier::storage::testing
