// Test helpers for the disk tier's tests: a small tier at a path, and reading a block back.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "storage/disk_tier.h"
#include "storage/testing/blocks.h"

namespace kvtier::storage::testing {

// A disk tier at `path` (1 MiB memtable); null, with a test failure, when it cannot open.
inline std::unique_ptr<DiskTier> OpenDiskTier(const std::string& path, uint64_t capacity = 1 << 20,
                                              EvictionHandler on_evict = nullptr) {
  DiskTierOptions options;
  options.path = path;
  options.capacity_bytes = capacity;
  options.memtable_bytes = 1 << 20;
  options.on_evict = std::move(on_evict);
  auto tier = DiskTier::Create(std::move(options));
  EXPECT_TRUE(tier.ok()) << tier.status();
  return tier.ok() ? std::move(tier).value() : nullptr;
}

// `block`'s payload as the tier returns it.
inline Result<std::vector<uint8_t>> ReadBack(Tier& tier, const TestBlock& block) {
  std::vector<uint8_t> out(block.payload.size());
  KVTIER_RETURN_IF_ERROR(tier.Get(block.ref(), out).status());
  return out;
}

}  // namespace kvtier::storage::testing
