#include "storage/tiered_store.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "storage/testing/tiered_store_fixture.h"

namespace kvtier::storage {
namespace {

using testing::kPage;
using testing::MakeBlock;
using testing::Recorded;
using testing::TestBlock;
using testing::TieredStoreTest;

TEST_F(TieredStoreTest, HostEvictionsMoveDownByPriorityAndDiskHitsComeBackUp) {
  auto store = Make(/*host_pages=*/2, /*disk_bytes=*/1 << 20);
  // Host holds two blocks: 0 (p60) and 1 (p10). Block 2 (p70) evicts block 1 (p10 < 35:
  // dropped), block 3 (p70) evicts block 0 (p60, the lowest left: moved to disk, told as
  // the disk's store, then the host's removal).
  auto b0 = MakeBlock(0, kPage, 60), b1 = MakeBlock(1, kPage, 10), b2 = MakeBlock(2, kPage, 70),
       b3 = MakeBlock(3, kPage, 70);
  for (auto* b : {&b0, &b1, &b2, &b3}) ASSERT_TRUE(store->Put(b->header, b->payload).ok());
  using K = StoreEvent::Kind;
  EXPECT_EQ(Events(), (std::vector<Recorded>{{K::kStored, Tier::kHost, 0},
                                             {K::kStored, Tier::kHost, 1},
                                             {K::kRemoved, Tier::kHost, 1},
                                             {K::kStored, Tier::kHost, 2},
                                             {K::kStored, Tier::kDisk, 0},
                                             {K::kRemoved, Tier::kHost, 0},
                                             {K::kStored, Tier::kHost, 3}}));
  EXPECT_FALSE(store->Contains(b1.ref()));
  EXPECT_EQ(store->Stats().dropped_below_priority, 1u);
  EXPECT_EQ(store->Stats().demoted, 1u);

  // Block 0 is read from disk and promoted, evicting block 2 (older than 3) to disk.
  ClearEvents();
  std::vector<uint8_t> out(kPage);
  auto hit = store->Get(b0.ref(), out);
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_EQ(out, b0.payload);
  EXPECT_EQ(hit->header.priority, 60);
  EXPECT_EQ(hit->tier, Tier::kDisk);
  EXPECT_EQ(store->Stats().promoted, 1u);
  EXPECT_EQ(Events(), (std::vector<Recorded>{{K::kStored, Tier::kDisk, 2},
                                             {K::kRemoved, Tier::kHost, 2},
                                             {K::kStored, Tier::kHost, 0}}));
  // The holdings list every copy: 0 and 3 in host, 0 (the copy it was promoted from) and 2
  // on disk.
  std::set<std::pair<Tier, uint64_t>> holdings;
  for (const auto& [tier, header] : store->Holdings()) holdings.emplace(tier, header.key.lo);
  EXPECT_EQ(holdings, (std::set<std::pair<Tier, uint64_t>>{
                          {Tier::kHost, 0}, {Tier::kHost, 3}, {Tier::kDisk, 0}, {Tier::kDisk, 2}}));
  // Read again, block 0 comes from the host tier it was promoted into.
  auto again = store->Get(b0.ref(), out);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->tier, Tier::kHost);

  // A worker's pool takes block 0: it leaves the host tier (told), its disk copy stays.
  ClearEvents();
  ASSERT_TRUE(store->host_pages().MoveOut(b0.ref()).ok());
  EXPECT_EQ(Events(), (std::vector<Recorded>{{K::kRemoved, Tier::kHost, 0}}));
  EXPECT_EQ(store->Stats().onboarded, 1u);
  auto from_disk = store->Get(b0.ref(), out);
  ASSERT_TRUE(from_disk.ok()) << from_disk.status();
  EXPECT_EQ(from_disk->tier, Tier::kDisk);
  // Block 2 is only on disk: there is nothing to move out of the host tier.
  EXPECT_EQ(store->host_pages().MoveOut(MakeBlock(2, kPage, 50).ref()).code(),
            StatusCode::kNotFound);
  EXPECT_EQ(store->Stats().onboarded, 1u);
}

TEST_F(TieredStoreTest, AdmissionFilterDecidesOnlyWhenTheDiskIsFull) {
  // A one-page host tier over a two-block disk tier whose filter admits even keys only,
  // told the disk's next victim each time.
  std::vector<uint64_t> displaced_seen;
  auto store =
      Make(1, 2 * kPage, [&](const BlockHeader& header, std::span<const DisplacedBlock> displaced) {
        for (const DisplacedBlock& block : displaced) displaced_seen.push_back(block.key.lo);
        return header.key.lo % 2 == 0;
      });
  for (uint64_t id = 0; id < 5; ++id) {
    auto block = MakeBlock(id, kPage);
    ASSERT_TRUE(store->Put(block.header, block.payload).ok());
  }
  // Blocks 0..3 were evicted from the host in order. 0 and 1 found room on disk (the
  // filter was not asked: 1 is odd); the disk was full for 2, admitted (even) in place of
  // 0, and for 3, refused (odd).
  EXPECT_FALSE(store->Contains(MakeBlock(0, kPage).ref()));
  EXPECT_TRUE(store->Contains(MakeBlock(1, kPage).ref()));
  EXPECT_TRUE(store->Contains(MakeBlock(2, kPage).ref()));
  EXPECT_FALSE(store->Contains(MakeBlock(3, kPage).ref()));
  EXPECT_EQ(store->Stats().dropped_by_admission, 1u);
  EXPECT_EQ(store->Stats().disk->blocks, 2u);
  // 2 would displace 0 (the disk's oldest); 3 then 1, the oldest left.
  EXPECT_EQ(displaced_seen, (std::vector<uint64_t>{0, 1}));
}

TEST_F(TieredStoreTest, DiskOnlyStoreAndRemoveEverywhere) {
  auto store = Make(0, 1 << 20);
  auto block = MakeBlock(4, 1000);
  ASSERT_TRUE(store->Put(block.header, block.payload).ok());
  EXPECT_EQ(Events().front(), (Recorded{StoreEvent::Kind::kStored, Tier::kDisk, 4}));
  EXPECT_TRUE(store->Remove(block.ref()).ok());
  EXPECT_EQ(store->Remove(block.ref()).code(), StatusCode::kNotFound);
  EXPECT_EQ(Events().back(), (Recorded{StoreEvent::Kind::kRemoved, Tier::kDisk, 4}));
}

// Block 5 is in the host tier and is pinned there; block 6, demoted to disk by block 7,
// is not (a sender then Gets it); a disk-only store pins nothing.
TEST_F(TieredStoreTest, OnlyTheHostTiersBlocksArePinnedInPlace) {
  const TestBlock five = MakeBlock(5, kPage), six = MakeBlock(6, kPage),
                  seven = MakeBlock(7, kPage);
  auto store = Make(2, 1 << 20);
  ASSERT_TRUE(store->Put(six.header, six.payload).ok());
  ASSERT_TRUE(store->Put(five.header, five.payload).ok());
  ASSERT_TRUE(store->Put(seven.header, seven.payload).ok());  // evicts block 6 to disk

  Result<PinnedBlock> pinned = store->host_pages().Pin(five.ref());
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  std::vector<uint8_t> bytes;
  pinned->ForEachPiece([&](std::span<const uint8_t> piece) {
    bytes.insert(bytes.end(), piece.begin(), piece.end());
  });
  EXPECT_EQ(bytes, five.payload);
  EXPECT_EQ(store->host_pages().Pin(six.ref()).status().code(), StatusCode::kNotFound);
  std::vector<uint8_t> out(kPage);
  EXPECT_EQ(store->Get(six.ref(), out)->tier, Tier::kDisk);
  pinned = NotFoundError("released");  // a pin must not outlive its tier
  store.reset();

  auto disk_only = Make(0, 1 << 20);  // the same directory: block 6 is there
  ASSERT_TRUE(disk_only->Contains(six.ref()));
  EXPECT_EQ(disk_only->host_pages().Pin(six.ref()).status().code(), StatusCode::kNotFound);
}

// A put written in place: blocks 6 and 5 fill a two-page host tier over a disk; reserving
// a page for block 7 moves block 6 (least recently used) down to disk as a put would, and
// the commit is told as a put's store. A store without a host tier has no pages to lend.
TEST_F(TieredStoreTest, APutWrittenInPlaceMovesVictimsDownAndIsToldAsAPut) {
  const TestBlock five = MakeBlock(5, kPage), six = MakeBlock(6, kPage),
                  seven = MakeBlock(7, kPage);
  auto store = Make(2, 1 << 20);
  ASSERT_TRUE(store->Put(six.header, six.payload).ok());
  ASSERT_TRUE(store->Put(five.header, five.payload).ok());
  ClearEvents();

  Result<HostReservation> reserved =
      store->host_pages().Reserve(std::vector<BlockHeader>{seven.header});
  ASSERT_TRUE(reserved.ok()) << reserved.status();
  EXPECT_EQ(Events(), (std::vector<Recorded>{{StoreEvent::Kind::kStored, Tier::kDisk, 6},
                                             {StoreEvent::Kind::kRemoved, Tier::kHost, 6}}));
  reserved->ForEachPiece(0, [&](std::span<uint8_t> piece) {
    std::copy_n(seven.payload.begin(), piece.size(), piece.begin());
  });
  const std::vector<Status> results = store->host_pages().Commit(std::move(*reserved));
  ASSERT_EQ(results.size(), 1u);
  EXPECT_TRUE(results[0].ok()) << results[0];
  EXPECT_EQ(Events().back(), (Recorded{StoreEvent::Kind::kStored, Tier::kHost, 7}));
  std::vector<uint8_t> out(kPage);
  EXPECT_EQ(store->Get(seven.ref(), out)->tier, Tier::kHost);
  EXPECT_EQ(out, seven.payload);
  store.reset();

  auto disk_only = Make(0, 1 << 20);
  EXPECT_EQ(disk_only->host_pages().Reserve(std::vector<BlockHeader>{five.header}).status().code(),
            StatusCode::kFailedPrecondition);
}

// Blocks 0 (p50, two pages), 1 (p10) and 2 (p50) fill a four-page host tier. A batch of
// four new pages evicts all three together: 1 is below the demotion priority and is
// dropped, 0 and 2 go down to disk in one batch, and each reads back from disk whole (the
// gathered payloads kept apart, the dropped one between them left out).
TEST_F(TieredStoreTest, TheVictimsOfABatchMoveDownTogether) {
  auto store = Make(/*host_pages=*/4, /*disk_bytes=*/1 << 20);
  const TestBlock b0 = MakeBlock(0, 2 * kPage - 100, 50), b1 = MakeBlock(1, kPage, 10),
                  b2 = MakeBlock(2, 777, 50);
  for (const TestBlock* b : {&b0, &b1, &b2}) ASSERT_TRUE(store->Put(b->header, b->payload).ok());
  std::vector<TestBlock> fresh;
  std::vector<PutItem> items;
  for (uint64_t id = 10; id < 14; ++id) fresh.push_back(MakeBlock(id, kPage, 60));
  for (const TestBlock& b : fresh) items.push_back({b.header, b.payload});
  for (const Status& put : store->PutBatch(items)) ASSERT_TRUE(put.ok()) << put;
  EXPECT_EQ(store->Stats().demoted, 2u);
  EXPECT_EQ(store->Stats().dropped_below_priority, 1u);
  EXPECT_FALSE(store->Contains(b1.ref()));
  for (const TestBlock* b : {&b0, &b2}) {
    std::vector<uint8_t> out(b->payload.size());
    auto hit = store->Get(b->ref(), out);
    ASSERT_TRUE(hit.ok()) << hit.status();
    EXPECT_EQ(hit->tier, Tier::kDisk);
    EXPECT_EQ(out, b->payload) << "block " << b->header.key.lo;
  }
}

// A batch get promotes its disk hits in one host put: blocks 0-3 are on disk (moved down
// together by the put of 4-7), and GetBatch [0, 1, 2, 3, 99] finds 0-3 there and 99
// nowhere; promoting 0-3 displaces 4-7, which go down in one more disk write, not four.
TEST_F(TieredStoreTest, ABatchsDiskHitsArePromotedTogether) {
  auto store = Make(/*host_pages=*/4, /*disk_bytes=*/1 << 20);
  const std::vector<TestBlock> old_blocks = Blocks(0, 4, kPage, 50);
  PutThenBatch(*store, old_blocks, Blocks(4, 4, kPage, 50));
  ASSERT_EQ(store->Stats().disk->put_batches, 1u);

  const TestBlock missing = MakeBlock(99, kPage, 50);
  std::vector<BlockRef> refs;
  for (const TestBlock& b : old_blocks) refs.push_back(b.ref());
  refs.push_back(missing.ref());
  std::vector<std::vector<uint8_t>> outs(refs.size(), std::vector<uint8_t>(kPage));
  std::vector<std::span<uint8_t>> out_spans(outs.begin(), outs.end());
  ClearEvents();
  const std::vector<Result<TieredHit>> hits = store->GetBatch(refs, out_spans);
  ASSERT_EQ(hits.size(), 5u);
  for (size_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(hits[i].ok()) << "block " << i << ": " << hits[i].status();
    EXPECT_EQ(hits[i]->tier, Tier::kDisk);
    EXPECT_EQ(outs[i], old_blocks[i].payload) << "block " << i;
  }
  EXPECT_EQ(hits[4].status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store->Stats().promoted, 4u);
  EXPECT_EQ(store->Stats().disk->put_batches, 2u) << "blocks 4-7 went down in one write";
  EXPECT_EQ(store->Stats().demoted, 8u);
  // Each tier tells its own changes in order: 4-7 stored on disk and leaving the host,
  // then 0-3 stored in the host.
  using K = StoreEvent::Kind;
  std::vector<Recorded> expected;
  for (uint64_t id = 4; id < 8; ++id) expected.push_back({K::kStored, Tier::kDisk, id});
  for (uint64_t id = 4; id < 8; ++id) expected.push_back({K::kRemoved, Tier::kHost, id});
  for (uint64_t id = 0; id < 4; ++id) expected.push_back({K::kStored, Tier::kHost, id});
  EXPECT_EQ(Events(), expected);
  std::vector<uint8_t> out(kPage);
  for (const TestBlock& b : old_blocks) EXPECT_EQ(store->Get(b.ref(), out)->tier, Tier::kHost);
}

// With two of the host tier's eight pages kept free ahead, the store's own thread moves
// the coldest blocks down as puts fill the tier, and the puts wait for no disk write:
// blocks 0-5 leave the room whole; each of blocks 6-9 takes a page of it, and the thread
// moves one block down (0, 1, 2, 3 in turn). A batch of four (20-23) needs more than the
// room: it moves two blocks down itself (4, 5), and the thread two more (6, 7).
TEST_F(TieredStoreTest, AThreadOfTheStoresKeepsRoomAheadOfPuts) {
  free_ahead_bytes_ = 2 * kPage;
  auto store = Make(/*host_pages=*/8, /*disk_bytes=*/1 << 20);
  CountMovesDownHere();
  const auto room_ahead = [&] { return store->Stats().host->bytes <= 6 * kPage; };
  for (const TestBlock& b : Blocks(0, 6, kPage, 50))
    ASSERT_TRUE(store->Put(b.header, b.payload).ok());
  EXPECT_EQ(store->Stats().demoted, 0u);
  for (const TestBlock& b : Blocks(6, 4, kPage, 50)) {
    ASSERT_TRUE(store->Put(b.header, b.payload).ok());
    ASSERT_TRUE(kvtier::testing::WaitUntil(room_ahead)) << "after block " << b.header.key.lo;
  }
  EXPECT_EQ(store->Stats().demoted, 4u);
  EXPECT_EQ(store->Stats().demoted_ahead, 4u);
  EXPECT_EQ(moved_down_here_.load(), 0);

  PutThenBatch(*store, {}, Blocks(20, 4, kPage, 50));
  EXPECT_EQ(moved_down_here_.load(), 2);
  ASSERT_TRUE(kvtier::testing::WaitUntil(room_ahead));
  EXPECT_EQ(store->Stats().demoted, 8u);
  EXPECT_EQ(store->Stats().demoted_ahead, 6u) << "all but the batch's own two";
  std::set<std::pair<Tier, uint64_t>> holdings;
  for (const auto& [tier, header] : store->Holdings()) holdings.emplace(tier, header.key.lo);
  std::set<std::pair<Tier, uint64_t>> expected;
  for (uint64_t id : {8, 9, 20, 21, 22, 23}) expected.emplace(Tier::kHost, id);
  for (uint64_t id = 0; id < 8; ++id) expected.emplace(Tier::kDisk, id);
  EXPECT_EQ(holdings, expected);
}

// Victims past 8 MiB go down in more than one disk batch (a put's gather buffer stays
// bounded): three 4 MiB blocks fill the host tier, a batch of three more moves all three
// down, and each reads back from disk whole.
TEST_F(TieredStoreTest, VictimsPastEightMiBMoveDownInSeveralWritesEachWhole) {
  constexpr uint64_t kBig = 4 << 20;
  auto store = Make(/*host_pages=*/3 * kBig / kPage, /*disk_bytes=*/64 << 20);
  const std::vector<TestBlock> old_blocks = Blocks(0, 3, kBig, 50);
  PutThenBatch(*store, old_blocks, Blocks(10, 3, kBig, 50));
  EXPECT_EQ(store->Stats().demoted, 3u);
  std::vector<uint8_t> out(kBig);
  for (const TestBlock& b : old_blocks) {
    auto hit = store->Get(b.ref(), out);
    ASSERT_TRUE(hit.ok()) << hit.status();
    EXPECT_EQ(hit->tier, Tier::kDisk);
    EXPECT_EQ(out, b.payload) << "block " << b.header.key.lo;
  }
}

// A put from a thread that works behind its callers makes its own room and leaves the
// room kept ahead to puts that callers wait for. Blocks 0-5 fill six of the eight pages
// (the two kept free are left whole). A batch of two (6, 7) put behind moves two blocks
// down (0, 1) on its own thread before it takes two pages, and two pages are still free
// when it returns: the store's thread was never needed.
// A caller that keeps the blocks itself gets without promotion: blocks 0-3 are on disk
// (moved down by 4-7), and GetBatch with PromoteDiskHits::kNo reads them from there and
// changes nothing: 4-7 stay in the host tier, and no event is told.
TEST_F(TieredStoreTest, ABatchGetWithoutPromotionLeavesTheTiersAsTheyWere) {
  auto store = Make(/*host_pages=*/4, /*disk_bytes=*/1 << 20);
  const std::vector<TestBlock> old_blocks = Blocks(0, 4, kPage, 50);
  PutThenBatch(*store, old_blocks, Blocks(4, 4, kPage, 50));
  std::vector<BlockRef> refs;
  for (const TestBlock& b : old_blocks) refs.push_back(b.ref());
  std::vector<std::vector<uint8_t>> outs(refs.size(), std::vector<uint8_t>(kPage));
  std::vector<std::span<uint8_t>> out_spans(outs.begin(), outs.end());
  ClearEvents();
  const std::vector<Result<TieredHit>> hits =
      store->GetBatch(refs, out_spans, PromoteDiskHits::kNo);
  ASSERT_EQ(hits.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(hits[i].ok()) << "block " << i << ": " << hits[i].status();
    EXPECT_EQ(hits[i]->tier, Tier::kDisk);
    EXPECT_EQ(outs[i], old_blocks[i].payload) << "block " << i;
  }
  EXPECT_EQ(store->Stats().promoted, 0u);
  EXPECT_EQ(store->Stats().demoted, 4u);
  EXPECT_TRUE(Events().empty());
  std::set<uint64_t> in_host;
  for (const auto& [tier, header] : store->Holdings()) {
    if (tier == Tier::kHost) in_host.insert(header.key.lo);
  }
  EXPECT_EQ(in_host, (std::set<uint64_t>{4, 5, 6, 7}));
}

TEST_F(TieredStoreTest, APutBehindMakesItsOwnRoomAndLeavesTheRoomAhead) {
  free_ahead_bytes_ = 2 * kPage;
  auto store = Make(/*host_pages=*/8, /*disk_bytes=*/1 << 20);
  CountMovesDownHere();
  for (const TestBlock& b : Blocks(0, 6, kPage, 50))
    ASSERT_TRUE(store->Put(b.header, b.payload).ok());
  const std::vector<TestBlock> behind = Blocks(6, 2, kPage, 50);
  std::vector<PutItem> items;
  for (const TestBlock& b : behind) items.push_back({b.header, b.payload});
  for (const Status& put : store->PutBatch(items, PutRoom::kOwn)) ASSERT_TRUE(put.ok()) << put;

  EXPECT_EQ(moved_down_here_.load(), 2);
  EXPECT_EQ(store->Stats().host->bytes, 6 * kPage);
  EXPECT_EQ(store->Stats().demoted_ahead, 0u);
  std::set<uint64_t> on_disk;
  for (const auto& [tier, header] : store->Holdings()) {
    if (tier == Tier::kDisk) on_disk.insert(header.key.lo);
  }
  EXPECT_EQ(on_disk, (std::set<uint64_t>{0, 1}));
}

TEST(TieredStoreOptionsTest, NeedsATier) {
  EXPECT_EQ(TieredStore::Create(TieredStoreOptions{}).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier::storage
