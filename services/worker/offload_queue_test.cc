// OffloadQueue: offloads staged and stored behind the caller, served from the staging
// until the store has them.
#include "services/worker/offload_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "tests/testing/test_util.h"

namespace kvtier::worker {
namespace {

using kvtier::testing::WaitUntil;

const storage::FormatTag kFormat = "L2/H2/D64/T16/fp16/W0/S0-test|f0000000000000009";
constexpr size_t kBlockBytes = 4096;

class OffloadQueueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    storage::TieredStoreOptions options;
    options.host.emplace();
    options.host->capacity_bytes = 16 * kBlockBytes;
    options.host->page_bytes = kBlockBytes;
    options.host->try_huge_pages = false;
    // The store's event of block `hold_` waits for `released_`: the queue's thread is
    // then inside its put, and what it stages waits in the staging.
    options.on_event = [this](const storage::StoreEvent& e) {
      if (e.kind == storage::StoreEvent::Kind::kRemoved && on_removed_)
        on_removed_(e.header.key.lo);
      if (e.kind != storage::StoreEvent::Kind::kStored || e.header.key.lo != hold_) return;
      in_put_ = true;
      WaitUntil([this] { return released_.load(); });
    };
    store_ = storage::TieredStore::Create(std::move(options)).value();
  }
  void TearDown() override { released_ = true; }

  std::unique_ptr<OffloadQueue> MakeQueue(uint64_t capacity_bytes) {
    return std::make_unique<OffloadQueue>(
        OffloadQueueOptions{.store = store_.get(), .capacity_bytes = capacity_bytes});
  }
  // Block `id`: its bytes all `id`, of `bytes` bytes.
  OffloadBlock Block(uint64_t id, size_t bytes = kBlockBytes) {
    payloads_.push_back(std::make_unique<std::vector<uint8_t>>(bytes, static_cast<uint8_t>(id)));
    return OffloadBlock{.key = BlockKey{7, id},
                        .parent = BlockKey{7, 0},
                        .first = true,
                        .salt_scope = 5,
                        .priority = 50,
                        .bytes = *payloads_.back()};
  }
  std::vector<bool> Stage(OffloadQueue& queue, const std::vector<OffloadBlock>& blocks) {
    const std::vector<const storage::FormatTag*> formats(blocks.size(), &kFormat);
    return queue.Stage(blocks, formats);
  }
  static storage::BlockRef Ref(uint64_t id) { return {BlockKey{7, id}, kFormat, 5}; }

  std::unique_ptr<storage::TieredStore> store_;
  std::vector<std::unique_ptr<std::vector<uint8_t>>> payloads_;
  uint64_t hold_ = UINT64_MAX;
  std::function<void(uint64_t)> on_removed_;  // with the id of each block the store removes
  std::atomic<bool> in_put_{false}, released_{false};
};

TEST_F(OffloadQueueTest, AStagedBlockIsServedUntilTheStoreHasIt) {
  hold_ = 1;
  auto queue = MakeQueue(4 * kBlockBytes);
  // Block 1 is staged; its put stalls in the store; block 2 is staged behind it.
  EXPECT_EQ(Stage(*queue, {Block(1)}), std::vector<bool>{true});
  ASSERT_TRUE(WaitUntil([this] { return in_put_.load(); }));
  EXPECT_EQ(Stage(*queue, {Block(2)}), std::vector<bool>{true});
  std::vector<uint8_t> out(kBlockBytes);
  ASSERT_TRUE(queue->CopyStaged(Ref(2), out));
  EXPECT_EQ(out, std::vector<uint8_t>(kBlockBytes, 2));
  // Under another salt scope or format, or into a buffer of another size, it is not there.
  EXPECT_FALSE(queue->CopyStaged({BlockKey{7, 2}, kFormat, 6}, out));
  EXPECT_FALSE(queue->CopyStaged({BlockKey{7, 2}, "other|f1", 5}, out));
  std::vector<uint8_t> small(kBlockBytes / 2);
  EXPECT_FALSE(queue->CopyStaged(Ref(2), small));
  EXPECT_EQ(queue->Stats().staged_bytes, 2 * kBlockBytes);

  released_ = true;
  queue->Flush();
  // Both are in the store now, with their checksums, and out of the staging.
  for (uint64_t id : {1, 2}) {
    auto hit = store_->Get(Ref(id), out);
    ASSERT_TRUE(hit.ok()) << hit.status();
    EXPECT_EQ(out, std::vector<uint8_t>(kBlockBytes, static_cast<uint8_t>(id)));
    EXPECT_EQ(hit->header.priority, 50);
    EXPECT_FALSE(queue->CopyStaged(Ref(id), out));
  }
  const OffloadQueueStats stats = queue->Stats();
  EXPECT_EQ(stats.staged, 2u);
  EXPECT_EQ(stats.stored, 2u);
  EXPECT_EQ(stats.served, 1u);
  EXPECT_EQ(stats.staged_bytes, 0u);
}

// Fetched back into a pool, a staged block is kept out of the host tier: dropped unstored
// while it waits, moved out once stored if the thread was storing it.
TEST_F(OffloadQueueTest, AWithdrawnBlockIsKeptOutOfTheHostTier) {
  hold_ = 1;
  auto queue = MakeQueue(8 * kBlockBytes);
  // Block 1's put stalls in the store; blocks 2, 3 and 4 wait behind it.
  EXPECT_EQ(Stage(*queue, {Block(1)}), std::vector<bool>{true});
  ASSERT_TRUE(WaitUntil([this] { return in_put_.load(); }));
  EXPECT_EQ(Stage(*queue, {Block(2), Block(3), Block(4)}), std::vector<bool>(3, true));
  // Pools fetched back 1 (being stored), 2 and 3, and block 9 (never staged).
  std::vector<uint8_t> out(kBlockBytes);
  ASSERT_TRUE(queue->CopyStaged(Ref(2), out));
  const std::vector<storage::BlockRef> landed = {Ref(1), Ref(2), Ref(3), Ref(9)};
  queue->Withdraw(landed);
  // Block 3 is evicted again before the thread takes it: stored after all.
  EXPECT_EQ(Stage(*queue, {Block(3)}), std::vector<bool>{true});
  // Until the thread drops it, block 2 is still served.
  ASSERT_TRUE(queue->CopyStaged(Ref(2), out));
  EXPECT_EQ(out, std::vector<uint8_t>(kBlockBytes, 2));

  released_ = true;
  queue->Flush();
  EXPECT_FALSE(store_->Contains(Ref(1))) << "stored, then moved out";
  EXPECT_FALSE(store_->Contains(Ref(2))) << "never stored";
  EXPECT_TRUE(store_->Contains(Ref(3)));
  EXPECT_TRUE(store_->Contains(Ref(4)));
  EXPECT_FALSE(queue->CopyStaged(Ref(2), out));
  const OffloadQueueStats stats = queue->Stats();
  EXPECT_EQ(stats.staged, 4u);
  EXPECT_EQ(stats.stored, 2u);
  EXPECT_EQ(stats.withdrawn, 2u);
  EXPECT_EQ(stats.staged_bytes, 0u);
  // Their buffers are free again: staged anew, block 2 is stored.
  EXPECT_EQ(Stage(*queue, {Block(2)}), std::vector<bool>{true});
  queue->Flush();
  EXPECT_TRUE(store_->Contains(Ref(2)));
}

// Block 1, withdrawn while stored, is evicted again by a pool just as the thread moves
// it out of the host tier (the store's removal event stages it): it is stored again.
TEST_F(OffloadQueueTest, ABlockStagedAgainAsItIsMovedOutIsStoredOnceMore) {
  hold_ = 1;
  auto queue = MakeQueue(4 * kBlockBytes);
  EXPECT_EQ(Stage(*queue, {Block(1)}), std::vector<bool>{true});
  ASSERT_TRUE(WaitUntil([this] { return in_put_.load(); }));
  const std::vector<storage::BlockRef> landed = {Ref(1)};
  queue->Withdraw(landed);
  const std::vector<OffloadBlock> again = {Block(1)};
  std::atomic<bool> staged_again{false};
  on_removed_ = [&](uint64_t id) {
    if (id == 1) staged_again = Stage(*queue, again) == std::vector<bool>{true};
  };
  released_ = true;
  queue->Flush();
  EXPECT_TRUE(staged_again.load());
  EXPECT_TRUE(store_->Contains(Ref(1)));
  const OffloadQueueStats stats = queue->Stats();
  EXPECT_EQ(stats.stored, 1u);
  EXPECT_EQ(stats.withdrawn, 0u);
  on_removed_ = nullptr;
}

TEST_F(OffloadQueueTest, ABlockThatFindsNoRoomIsLeftToTheCaller) {
  auto queue = MakeQueue(2 * kBlockBytes);
  // Blocks 1 and 2 fill the staging; 3 finds no room; 2 again is on its way already.
  EXPECT_EQ(Stage(*queue, {Block(1), Block(2), Block(3), Block(2)}),
            (std::vector<bool>{true, true, false, true}));
  EXPECT_EQ(queue->Stats().no_room, 1u);
  EXPECT_EQ(queue->Stats().staged, 2u);
  EXPECT_EQ(queue->Stats().capacity_bytes, 2 * kBlockBytes);
  queue->Flush();
  // Their buffers are free again: block 4 reuses one.
  EXPECT_EQ(Stage(*queue, {Block(4)}), std::vector<bool>{true});
  queue->Flush();
  EXPECT_TRUE(store_->Contains(Ref(4)));
  EXPECT_FALSE(store_->Contains(Ref(3)));
}

TEST_F(OffloadQueueTest, APutTheStoreRefusesIsCountedAndDropped) {
  auto queue = MakeQueue(32 * kBlockBytes);
  // Block 1 is larger than the whole host tier (16 blocks): the store refuses it.
  EXPECT_EQ(Stage(*queue, {Block(1, 17 * kBlockBytes), Block(2)}), (std::vector<bool>{true, true}));
  queue->Flush();
  EXPECT_EQ(queue->Stats().failed, 1u);
  EXPECT_EQ(queue->Stats().stored, 1u);
  std::vector<uint8_t> out(17 * kBlockBytes);
  EXPECT_FALSE(queue->CopyStaged(Ref(1), out)) << "dropped, not kept staged";
  EXPECT_FALSE(store_->Contains(Ref(1)));
  EXPECT_TRUE(store_->Contains(Ref(2)));
}

TEST_F(OffloadQueueTest, TheDestructorStoresEverythingStaged) {
  hold_ = 1;
  auto queue = MakeQueue(8 * kBlockBytes);
  // Block 1's put stalls; blocks 2-6 are staged behind it; then the queue goes.
  EXPECT_EQ(Stage(*queue, {Block(1)}), std::vector<bool>{true});
  ASSERT_TRUE(WaitUntil([this] { return in_put_.load(); }));
  std::vector<OffloadBlock> blocks;
  for (uint64_t id = 2; id <= 6; ++id) blocks.push_back(Block(id));
  EXPECT_EQ(Stage(*queue, blocks), std::vector<bool>(5, true));
  released_ = true;
  queue.reset();
  for (uint64_t id = 1; id <= 6; ++id) EXPECT_TRUE(store_->Contains(Ref(id))) << "block " << id;
}

// The staging's puts make their own room. The store: a host tier of 16 blocks over a
// disk, 4 blocks of it kept free by the store's own thread. Blocks 1-12 fill the host
// tier up to that room; blocks 13-20 are then staged and stored, moving 8 blocks down to
// disk on the staging's thread and leaving the 4 free to the worker's own puts: the
// store's thread moved none.
TEST_F(OffloadQueueTest, ItsPutsMakeTheirOwnRoomAndLeaveTheStoresRoomAhead) {
  kvtier::testing::TempDir dir;
  storage::TieredStoreOptions options;
  options.host.emplace();
  options.host->capacity_bytes = 16 * kBlockBytes;
  options.host->page_bytes = kBlockBytes;
  options.host->try_huge_pages = false;
  options.disk.emplace();
  options.disk->path = dir.path();
  options.disk->capacity_bytes = 1 << 20;
  options.disk->memtable_bytes = 1 << 20;
  options.free_ahead_bytes = 4 * kBlockBytes;
  store_ = storage::TieredStore::Create(std::move(options)).value();
  auto queue = MakeQueue(32 * kBlockBytes);
  const auto stage_and_store = [&](uint64_t first, uint64_t last) {
    std::vector<OffloadBlock> blocks;
    for (uint64_t id = first; id <= last; ++id) blocks.push_back(Block(id));
    EXPECT_EQ(Stage(*queue, blocks), std::vector<bool>(blocks.size(), true));
    queue->Flush();
  };
  stage_and_store(1, 12);
  EXPECT_EQ(store_->Stats().demoted, 0u);
  stage_and_store(13, 20);

  ASSERT_TRUE(WaitUntil([&] { return store_->Stats().host->bytes <= 12 * kBlockBytes; }));
  const storage::TieredStoreStats stats = store_->Stats();
  EXPECT_EQ(stats.demoted, 8u);
  EXPECT_EQ(stats.demoted_ahead, 0u);
  EXPECT_EQ(queue->Stats().stored, 20u);
  queue.reset();
  store_.reset();  // before its directory goes
}

}  // namespace
}  // namespace kvtier::worker
