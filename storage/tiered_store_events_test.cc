// The order of a TieredStore's events: told as the changes happen in each tier, also
// when several threads and the store's own demoter change it at once.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "storage/testing/tiered_store_fixture.h"
#include "storage/tiered_store.h"

namespace kvtier::storage {
namespace {

using testing::kPage;
using testing::MakeBlock;
using testing::Recorded;
using testing::TestBlock;
using testing::TieredStoreTest;

class TieredStoreEventsTest : public TieredStoreTest {
 protected:
  void ChangeConcurrentlyThenCheckEvents();
};

// Block 4 moves down to disk (block 5 takes the one host page) and is corrupted there.
// Its get reports data loss and returns nothing; the disk tier drops it and that is told
// as the disk's removal, so the coordinator stops naming this node for it.
TEST_F(TieredStoreEventsTest, ACorruptDiskBlockIsToldAsRemoved) {
  auto store = Make(/*host_pages=*/1, /*disk_bytes=*/1 << 20);
  const TestBlock b4 = MakeBlock(4, kPage), b5 = MakeBlock(5, kPage);
  ASSERT_TRUE(store->Put(b4.header, b4.payload).ok());
  ASSERT_TRUE(store->Put(b5.header, b5.payload).ok());
  ASSERT_TRUE(testing::CorruptPayload(dir_.path(), b4.payload));
  ClearEvents();
  std::vector<uint8_t> out(kPage);
  EXPECT_EQ(store->Get(b4.ref(), out).status().code(), StatusCode::kDataLoss);
  using K = StoreEvent::Kind;
  EXPECT_EQ(Events(), (std::vector<Recorded>{{K::kRemoved, Tier::kDisk, 4}}));
  EXPECT_EQ(store->Stats().promoted, 0u);
  ASSERT_EQ(store->Holdings().size(), 1u);
  EXPECT_EQ(store->Holdings()[0].second.key.lo, 5u);
}

// Four threads put (priority 50: demoted when evicted), get (a disk hit comes back up)
// and now and then remove 24 blocks through a host tier of 6 and a disk tier of 12
// (puts into the host tier run in parallel). Replayed in the order they were told, the
// events say which tiers hold each block at the end, as the holdings list them.
// Four threads put, get and remove 24 blocks at random over a six-page host tier and a
// twelve-page disk; the events told, replayed, say where each block is.
void TieredStoreEventsTest::ChangeConcurrentlyThenCheckEvents() {
  auto store = Make(/*host_pages=*/6, /*disk_bytes=*/12 * kPage);
  constexpr uint64_t kBlocks = 24;
  std::vector<TestBlock> blocks;
  for (uint64_t id = 0; id < kBlocks; ++id) blocks.push_back(MakeBlock(id, kPage, 50));
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::vector<uint8_t> out(kPage);
      for (int op = 0; op < 3000; ++op) {
        const TestBlock& block = blocks[rng() % kBlocks];
        const unsigned what = rng() % 20;
        if (what == 0) {
          (void)store->Remove(block.ref());
        } else if (what < 8) {
          (void)store->Get(block.ref(), out);
        } else {
          (void)store->Put(block.header,
                           block.payload);  // kResourceExhausted now and then: every page in a copy
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  // The store's own thread, where it keeps room ahead, finishes moving blocks down.
  ASSERT_TRUE(kvtier::testing::WaitUntil(
      [&] { return store->Stats().host->bytes + free_ahead_bytes_ <= 6 * kPage; }));

  const std::vector<Recorded> events = Events();  // not held while the tiers' locks are taken below
  std::map<uint64_t, std::pair<bool, bool>> told;  // block -> (in host, on disk)
  for (const Recorded& e : events) {
    auto& [host, disk] = told[e.id];
    (e.tier == Tier::kHost ? host : disk) = e.kind == StoreEvent::Kind::kStored;
  }
  std::map<uint64_t, std::pair<bool, bool>> held;
  for (const auto& [tier, header] : store->Holdings()) {
    auto& [host, disk] = held[header.key.lo];
    (tier == Tier::kHost ? host : disk) = true;
  }
  ASSERT_GT(store->Stats().demoted, 0u) << "the run moved blocks down";
  ASSERT_GT(store->Stats().promoted, 0u) << "and back up";
  const auto where = [](std::pair<bool, bool> tiers) {
    return std::string(tiers.first ? "host" : "") + (tiers.first && tiers.second ? "+" : "") +
           (tiers.second ? "disk" : "") + (tiers.first || tiers.second ? "" : "nowhere");
  };
  for (uint64_t id = 0; id < kBlocks; ++id) {
    EXPECT_EQ(where(told[id]), where(held[id]))
        << "block " << id << " (" << events.size() << " events)";
  }
}

TEST_F(TieredStoreEventsTest, ConcurrentChangesAreToldInTheOrderTheyHappen) {
  ChangeConcurrentlyThenCheckEvents();
}

// The same with two pages kept free by the store's own thread, which moves blocks down
// beside the puts, gets and removals.
TEST_F(TieredStoreEventsTest, ConcurrentChangesBesideTheStoresDemotionsAreToldInOrder) {
  free_ahead_bytes_ = 2 * kPage;
  ChangeConcurrentlyThenCheckEvents();
}

// Block 1 is put again (at priority 40, now the lowest) on one thread, and telling that
// store is held up; another thread's put of block 3 then needs room and evicts block 1
// to disk. The eviction must not be told before the store it follows: it waits (here up
// to 200 ms, then the first is let go), and the last word on block 1 is its move to disk:
// stored there, then removed from the host tier.
TEST_F(TieredStoreEventsTest, AStoreIsToldBeforeTheEvictionThatFollowsIt) {
  auto store = Make(/*host_pages=*/2, /*disk_bytes=*/1 << 20);
  const TestBlock b1 = MakeBlock(1, kPage, 50), b2 = MakeBlock(2, kPage, 50),
                  b3 = MakeBlock(3, kPage, 50);
  ASSERT_TRUE(store->Put(b1.header, b1.payload).ok());
  ASSERT_TRUE(store->Put(b2.header, b2.payload).ok());
  TestBlock lower = b1;
  lower.header.priority = 40;
  std::atomic<bool> held{false}, let_go{false}, evicted{false};
  before_told_ = [&](const StoreEvent& event) {
    if (event.kind == StoreEvent::Kind::kStored && event.header.key.lo == 1 && !let_go.load()) {
      held = true;
      while (!let_go.load()) std::this_thread::yield();
    }
  };
  std::thread refresh([&] { EXPECT_TRUE(store->Put(lower.header, lower.payload).ok()); });
  ASSERT_TRUE(kvtier::testing::WaitUntil([&] { return held.load(); }));
  std::thread evict([&] {
    EXPECT_TRUE(store->Put(b3.header, b3.payload).ok());
    evicted = true;
  });
  kvtier::testing::WaitUntil([&] { return evicted.load(); }, std::chrono::milliseconds(200));
  let_go = true;
  refresh.join();
  evict.join();
  std::vector<Recorded> about_1;
  for (const Recorded& e : Events()) {
    if (e.id == 1) about_1.push_back(e);
  }
  using K = StoreEvent::Kind;
  ASSERT_GE(about_1.size(), 3u);
  EXPECT_EQ(std::vector<Recorded>(about_1.end() - 3, about_1.end()),
            (std::vector<Recorded>{{K::kStored, Tier::kHost, 1},
                                   {K::kStored, Tier::kDisk, 1},
                                   {K::kRemoved, Tier::kHost, 1}}));
  EXPECT_EQ(store->Holdings().size(), 3u);  // 2 and 3 in host, 1 on disk
}

}  // namespace
}  // namespace kvtier::storage
