// The TieredStore tests' fixture: a store of host pages over a disk tier in a scratch
// directory, whose events are recorded. Test-only.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "storage/testing/blocks.h"
#include "storage/tiered_store.h"
#include "tests/testing/test_util.h"

namespace kvtier::storage::testing {

using kvtier::testing::TempDir;

constexpr uint32_t kPage = 4096;

struct Recorded {
  StoreEvent::Kind kind;
  Tier tier;
  uint64_t id;
  friend bool operator==(const Recorded&, const Recorded&) = default;
};

class TieredStoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<TieredStore> Make(uint64_t host_pages, uint64_t disk_bytes,
                                    decltype(TieredStoreOptions::admit_to_disk) admit = nullptr) {
    TieredStoreOptions options;
    if (host_pages > 0) {
      options.host = HostTierOptions{};
      options.host->capacity_bytes = host_pages * kPage;
      options.host->page_bytes = kPage;
      options.host->try_huge_pages = false;
    }
    if (disk_bytes > 0) {
      options.disk = DiskTierOptions{};
      options.disk->path = dir_.path();
      options.disk->capacity_bytes = disk_bytes;
      options.disk->memtable_bytes = 1 << 20;
    }
    options.admit_to_disk = std::move(admit);
    options.free_ahead_bytes = free_ahead_bytes_;
    options.on_event = [this](const StoreEvent& event) {
      if (before_told_) before_told_(event);
      MutexLock lock(events_mu_);
      events_.push_back(Recorded{event.kind, event.tier, event.header.key.lo});
    };
    auto store = TieredStore::Create(std::move(options));
    EXPECT_TRUE(store.ok()) << store.status();
    return std::move(store).value();
  }

  // `count` blocks of `bytes` from id `first` on.
  static std::vector<TestBlock> Blocks(uint64_t first, uint64_t count, uint64_t bytes,
                                       uint8_t priority) {
    std::vector<TestBlock> blocks;
    for (uint64_t id = first; id < first + count; ++id)
      blocks.push_back(MakeBlock(id, bytes, priority));
    return blocks;
  }

  // `first` put one at a time, then `then` in one batch (which makes room for all of it at once).
  static void PutThenBatch(TieredStore& store, const std::vector<TestBlock>& first,
                           const std::vector<TestBlock>& then) {
    for (const TestBlock& b : first) ASSERT_TRUE(store.Put(b.header, b.payload).ok());
    std::vector<PutItem> items;
    for (const TestBlock& b : then) items.push_back({b.header, b.payload});
    for (const Status& put : store.PutBatch(items)) ASSERT_TRUE(put.ok()) << put;
  }

  // From now on, counts into moved_down_here_ the blocks that puts on the calling thread
  // move down to disk (not those the store's own thread moves).
  void CountMovesDownHere() {
    before_told_ = [this, here = std::this_thread::get_id()](const StoreEvent& event) {
      if (event.kind == StoreEvent::Kind::kStored && event.tier == Tier::kDisk &&
          std::this_thread::get_id() == here) {
        moved_down_here_.fetch_add(1);
      }
    };
  }

  // What the store told so far (a copy: the demoter's thread may add to it meanwhile).
  std::vector<Recorded> Events() {
    MutexLock lock(events_mu_);
    return events_;
  }
  void ClearEvents() {
    MutexLock lock(events_mu_);
    events_.clear();
  }

  TempDir dir_;
  uint64_t free_ahead_bytes_ = 0;  // Make's TieredStoreOptions::free_ahead_bytes
  Mutex events_mu_;                // tests that change the store from several threads
  std::function<void(const StoreEvent&)> before_told_;  // runs first in on_event
  std::atomic<int> moved_down_here_{0};                 // CountMovesDownHere
  std::vector<Recorded> events_ KVTIER_GUARDED_BY(events_mu_);
};

}  // namespace kvtier::storage::testing
