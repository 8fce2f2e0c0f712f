// A worker's offload allocates nothing per block: once warm, an allocation that evicts 64
// cached blocks into the node's host tier makes no more heap allocations than one that
// evicts 8, counted process-wide: the pool's eviction, reading the victims, their
// headers, and the host tier's put. Without staging they are stored before Allocate
// returns; with staging (worker.offload_staging_bytes) the count goes on until the
// staging's thread has stored them.
//
// This binary counts with tests/testing/heap_allocations.h; the other worker tests do not.
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "services/worker/testing/worker_testing.h"
#include "services/worker/tier_link.h"
#include "tests/testing/heap_allocations.h"

namespace kvtier::worker {
namespace {

using ::kvtier::testing::MedianAllocations;
using testing::TestLayout;

constexpr uint32_t kPoolBlocks = 1024;
constexpr uint32_t kFew = 8, kMany = 64;
constexpr int kRounds = 7;
// Allocations an allocation evicting kMany blocks may make beyond one evicting kFew
// (their medians over kRounds): the worker and its tier run on this thread, the
// staging's store on one more (seen: 0-1 more); one allocation per block would be 56.
constexpr uint64_t kSlack = 2;

// The parameter: the offload staging's bytes (0: none).
class OffloadAllocationTest : public ::testing::TestWithParam<uint64_t> {
 protected:
  void SetUp() override {
    storage::TieredStoreOptions tiers;
    tiers.host.emplace();
    tiers.host->capacity_bytes =
        16 * kPoolBlocks * 4096ull;  // every round's victims, with room to spare
    tiers.host->page_bytes = 4096;
    tiers.host->try_huge_pages = false;
    store_ = storage::TieredStore::Create(std::move(tiers)).value();
    link_ = std::make_unique<TierLink>(
        TierLinkOptions{.store = store_.get(), .staging_bytes = GetParam()});
    worker_ = Worker::Create(
                  WorkerOptions{.pools = {{TestLayout(), kPoolBlocks}}, .offload = link_.get()})
                  .value();
  }

  // Sequence `sequence` of `blocks` new blocks (keys of its own), committed with priority
  // 60 (worth offloading) and freed: cached, the pool's next victims after older ones.
  // Returns the allocations its Allocate made.
  uint64_t ComputeAndCache(uint64_t sequence, uint32_t blocks) {
    std::vector<BlockKey> keys;
    for (uint32_t i = 0; i < blocks; ++i) keys.push_back(BlockKey{sequence, i});
    const uint64_t before = ::kvtier::testing::HeapAllocations();
    const Result<Allocation> allocated =
        worker_->Allocate({.client = 1,
                           .sequence = sequence,
                           .root = testing::kRoot,
                           .block_keys = keys,
                           .num_tokens = blocks * TestLayout().tokens_per_block()});
    while (link_->StagingStats().staged_bytes > 0) std::this_thread::yield();  // stored, if staged
    const uint64_t counted = ::kvtier::testing::HeapAllocations() - before;
    EXPECT_TRUE(allocated.ok()) << allocated.status();
    const kvtier::RetentionConfig keep{.ranges = {{.first_token = 0, .priority = 60}}};
    EXPECT_TRUE(worker_->Commit(1, sequence, keys, {}, keep).ok());
    EXPECT_TRUE(worker_->Free(1, sequence).ok());
    (void)worker_->TakeEvents();  // as a node's tick would
    return counted;
  }

  std::unique_ptr<storage::TieredStore> store_;
  std::unique_ptr<TierLink> link_;
  std::unique_ptr<Worker> worker_;
};

// The pool full of cached blocks; then each round computes 8 or 64 new ones, evicting as
// many of the oldest into the host tier.
TEST_P(OffloadAllocationTest, AnAllocationThatOffloadsAllocatesNothingPerBlock) {
  uint64_t sequence = 1;
  for (uint32_t filled = 0; filled < kPoolBlocks; filled += kMany)
    ComputeAndCache(sequence++, kMany);
  ComputeAndCache(sequence++, kMany);  // warm: the first evictions and puts
  ComputeAndCache(sequence++, kMany);
  const uint64_t offloaded_before = worker_->Stats().offloaded_blocks;
  const uint64_t staged_before = link_->StagingStats().staged;
  std::vector<uint64_t> few, many;
  for (int round = 0; round < kRounds; ++round) few.push_back(ComputeAndCache(sequence++, kFew));
  for (int round = 0; round < kRounds; ++round) many.push_back(ComputeAndCache(sequence++, kMany));
  ASSERT_EQ(worker_->Stats().offloaded_blocks - offloaded_before, kRounds * (kFew + kMany))
      << "every round evicted as many blocks as it computed, into the host tier";
  EXPECT_EQ(link_->StagingStats().staged - staged_before,
            GetParam() > 0 ? kRounds * (kFew + kMany) : 0u)
      << "with staging, through it";
  EXPECT_LE(MedianAllocations(many), MedianAllocations(few) + kSlack)
      << "an allocation offloading " << kFew << " blocks made " << MedianAllocations(few)
      << " allocations, " << kMany << " blocks " << MedianAllocations(many);
}

INSTANTIATE_TEST_SUITE_P(StoredAtOnceOrStaged, OffloadAllocationTest,
                         ::testing::Values(0, 8ull << 20),
                         [](const auto& info) { return info.param == 0 ? "AtOnce" : "Staged"; });

}  // namespace
}  // namespace kvtier::worker
