// Test helpers for the disk tier's tests: a small tier at a path, and reading a block back.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "storage/disk_tier.h"
#include "storage/testing/blocks.h"

namespace kvtier::storage::testing {

// The options of a test's disk tier at `path`: `capacity` bytes, a 1 MiB memtable.
inline DiskTierOptions TestDiskOptions(const std::string& path, uint64_t capacity) {
  DiskTierOptions options;
  options.path = path;
  options.capacity_bytes = capacity;
  options.memtable_bytes = 1 << 20;
  return options;
}

// A disk tier at `path` (1 MiB memtable) with the given handlers; null, with a test failure, when
// it cannot open.
inline std::unique_ptr<DiskTier> OpenDiskTier(
    const std::string& path, uint64_t capacity = 1 << 20, EvictionHandler on_evict = nullptr,
    std::function<void(const BlockHeader&)> on_removed = nullptr) {
  DiskTierOptions options = TestDiskOptions(path, capacity);
  options.on_evict = std::move(on_evict);
  options.on_removed = std::move(on_removed);
  auto tier = DiskTier::Create(std::move(options));
  EXPECT_TRUE(tier.ok()) << tier.status();
  return tier.ok() ? std::move(tier).value() : nullptr;
}

// `block`'s payload as the tier returns it.
inline Result<std::vector<uint8_t>> ReadBack(BlockTier& tier, const TestBlock& block) {
  std::vector<uint8_t> out(block.payload.size());
  KVTIER_RETURN_IF_ERROR(tier.Get(block.ref(), out).status());
  return out;
}

// `threads` threads that get blocks from `tier` until Stop(), reader r taking
// `pick(r, i)` on its i-th read, and count what they saw: hits whose bytes were the
// block's, hits with wrong bytes, and errors other than kNotFound (a block evicted or
// removed meanwhile is not an error).
class CheckingReaders {
 public:
  CheckingReaders(BlockTier& tier, int threads,
                  std::function<const TestBlock&(uint64_t reader, uint64_t i)> pick)
      : pick_(std::move(pick)) {
    for (int r = 0; r < threads; ++r) {
      threads_.emplace_back([this, &tier, r] {
        std::vector<uint8_t> out;
        for (uint64_t i = 0; !done_.load(); ++i) {
          const TestBlock& block = pick_(static_cast<uint64_t>(r), i);
          out.resize(block.payload.size());
          auto header = tier.Get(block.ref(), out);
          if (header.ok()) {
            hits.fetch_add(1);
            if (out != block.payload) wrong.fetch_add(1);
          } else if (header.status().code() != StatusCode::kNotFound) {
            errors.fetch_add(1);
          }
        }
      });
    }
  }
  ~CheckingReaders() { Stop(); }
  void Stop() {
    done_ = true;
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

  std::atomic<uint64_t> hits{0}, wrong{0}, errors{0};

 private:
  const std::function<const TestBlock&(uint64_t, uint64_t)> pick_;
  std::atomic<bool> done_{false};
  std::vector<std::thread> threads_;  // last: they start once everything above exists
};

}  // namespace kvtier::storage::testing
