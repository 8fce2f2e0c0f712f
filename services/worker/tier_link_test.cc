#include "services/worker/tier_link.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "services/worker/testing/worker_testing.h"

namespace kvtier::worker {
namespace {

using testing::Tokens;
using testing::TestLayout;

TEST(TierLinkTest, EvictedBlocksLandInTheHostTierWithFullHeaders) {
  storage::TieredStoreOptions store_options;
  store_options.host.emplace();
  store_options.host->capacity_bytes = 64 * 4096;
  store_options.host->page_bytes = 4096;
  store_options.host->try_huge_pages = false;
  auto store = storage::TieredStore::Create(std::move(store_options)).value();
  TierLink link({.store = store.get()});
  auto worker = Worker::Create(WorkerOptions{.pools = {{TestLayout(), 1}}, .offload = &link, .onboard = &link}).value();

  // Block A (priority 60, tenant scope 0xABC, format tag 9) is committed, written and released.
  const BlockKey root{3, 3}, a{0x2001, 1}, b{0x2002, 2};
  coordinator::RetentionConfig keep{.ranges = {{.first_token = 0, .priority = 60}}};
  ASSERT_TRUE(worker->Allocate({.client = 1, .sequence = 1, .root = root, .salt_scope = 0xABC, .format_tag = 9,
                                .block_keys = std::vector<BlockKey>{a}, .tokens = Tokens(0, 4)}).ok());
  std::span<uint8_t> pool = worker->PoolBytes(0);
  for (size_t i = 0; i < 512; ++i) pool[i] = static_cast<uint8_t>(i * 7);
  const std::vector<uint8_t> written(pool.begin(), pool.begin() + 512);
  ASSERT_TRUE(worker->Commit(1, 1, std::vector<BlockKey>{a}, Tokens(0, 4), keep).ok());
  ASSERT_TRUE(worker->Free(1, 1).ok());
  // A new prompt needs the pool's only block: A is offloaded into the store.
  ASSERT_TRUE(worker->Allocate({.client = 1, .sequence = 2, .root = root, .block_keys = std::vector<BlockKey>{b},
                                .tokens = Tokens(100, 4)}).ok());
  EXPECT_EQ(worker->Stats().offloaded_blocks, 1u);

  const std::string format = StorageFormatTag(TestLayout(), 9);
  EXPECT_EQ(format, TestLayout().Fingerprint() + "|f0000000000000009");
  std::vector<uint8_t> out(512);
  auto hit = store->Get(storage::BlockRef{a, format, 0xABC}, out);
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_EQ(out, written);
  EXPECT_EQ(hit->tier, storage::TierKind::kHost);
  EXPECT_EQ(hit->header.parent, root);
  EXPECT_TRUE(hit->header.first_in_chain);
  EXPECT_EQ(hit->header.priority, 60);
  // Another engine format or another tenant never sees it.
  EXPECT_FALSE(store->Contains(storage::BlockRef{a, StorageFormatTag(TestLayout(), 10), 0xABC}));
  EXPECT_FALSE(store->Contains(storage::BlockRef{a, format, 0xABD}));

  // Sequence 2 is done; a third prompt [A, C] finds A in neither the pool (B holds the
  // only block... freed now) nor computed: onboard brings A back from the host tier.
  ASSERT_TRUE(worker->Free(1, 2).ok());
  auto again = worker->Allocate({.client = 1, .sequence = 3, .root = root, .salt_scope = 0xABC, .format_tag = 9,
                                 .block_keys = std::vector<BlockKey>{a}, .tokens = Tokens(0, 4)});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->reused_blocks, 0u);
  std::fill(pool.begin(), pool.begin() + 512, 0);
  auto onboarded = worker->Onboard(1, 3, std::vector<BlockKey>{a}, {});
  ASSERT_TRUE(onboarded.ok()) << onboarded.status();
  EXPECT_EQ(onboarded->onboarded_blocks, 1u);
  EXPECT_EQ(onboarded->from_host, 1u);
  EXPECT_EQ(onboarded->from_disk, 0u);
  EXPECT_EQ(onboarded->cached_blocks, 1u);
  const size_t at = size_t{again->block_table[0]} * 512;
  EXPECT_TRUE(std::equal(written.begin(), written.end(), pool.begin() + static_cast<std::ptrdiff_t>(at)));
  EXPECT_EQ(worker->Stats().onboarded_blocks, 1u);
  EXPECT_EQ(worker->Stats().onboarded_bytes, 512u);
  // A is committed again: the pool announces it and a lookup finds it locally.
  EXPECT_EQ(worker->LookupLocal(0, root, std::vector<BlockKey>{a}).value(), 1u);
  // Onboarding again fetches nothing more.
  EXPECT_EQ(worker->Onboard(1, 3, std::vector<BlockKey>{a}, {})->onboarded_blocks, 0u);
}

TEST(TierLinkTest, OnboardStopsAtTheFirstBlockTheStoreLacks) {
  storage::TieredStoreOptions store_options;
  store_options.host.emplace();
  store_options.host->capacity_bytes = 16 * 4096;
  store_options.host->page_bytes = 4096;
  store_options.host->try_huge_pages = false;
  auto store = storage::TieredStore::Create(std::move(store_options)).value();
  TierLink link({.store = store.get()});
  auto worker = Worker::Create(WorkerOptions{.pools = {{TestLayout(), 4}}, .offload = &link, .onboard = &link}).value();
  // The store holds blocks 0 and 2 of a three-block prompt, not block 1.
  const BlockKey root{3, 3};
  const std::vector<BlockKey> keys = {{0x3000, 0}, {0x3000, 1}, {0x3000, 2}};
  const std::vector<uint8_t> bytes(512, 0x5A);
  const KvLayout layout = TestLayout();
  for (size_t i : {0, 2}) {
    ASSERT_TRUE(link.Offload(OffloadBlock{keys[i], i == 0 ? root : keys[i - 1], i == 0, 0, 1, 50, &layout, bytes}).ok());
  }
  ASSERT_TRUE(worker->Allocate({.client = 1, .sequence = 1, .root = root, .salt_scope = 1, .block_keys = keys,
                                .tokens = Tokens(0, 12)}).ok());
  auto onboarded = worker->Onboard(1, 1, keys, {});
  ASSERT_TRUE(onboarded.ok()) << onboarded.status();
  EXPECT_EQ(onboarded->onboarded_blocks, 1u) << "block 1 is missing, so block 2 cannot be used";
  EXPECT_EQ(worker->LookupLocal(0, root, keys).value(), 1u);
  EXPECT_EQ(worker->Onboard(1, 1, std::vector<BlockKey>(4, keys[0]), {}).status().code(), StatusCode::kInvalidArgument);
}

// A store of `pages` 4 KiB host pages.
std::unique_ptr<storage::TieredStore> HostStore(uint64_t pages) {
  storage::TieredStoreOptions options;
  options.host.emplace();
  options.host->capacity_bytes = pages * 4096;
  options.host->page_bytes = 4096;
  options.host->try_huge_pages = false;
  return storage::TieredStore::Create(std::move(options)).value();
}

// Sixteen victims offloaded in one batch by the caller and 3 helpers, then fetched back
// in one batch: every block is stored with its own bytes and comes back byte for byte.
// With block 5 gone from the store, a batch fetch reports it missing and still brings
// the others (the helpers fetch in parallel; Onboard uses the leading run).
TEST(TierLinkTest, BatchesAreSplitAmongHelpersAndEachBlockKeepsItsBytes) {
  auto store = HostStore(64);
  TierLink link({.store = store.get(), .threads = 3});
  const KvLayout layout = TestLayout();
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<OffloadBlock> victims;
  for (uint8_t i = 0; i < 16; ++i) bytes.push_back(testing::Pattern(i));
  for (uint8_t i = 0; i < 16; ++i) {
    victims.push_back({testing::Key(i), i == 0 ? testing::kRoot : testing::Key(i - 1), i == 0, 0, 1, 50, &layout,
                       bytes[i]});
  }
  for (const Status& taken : link.OffloadBatch(victims)) EXPECT_TRUE(taken.ok()) << taken;

  std::vector<std::vector<uint8_t>> back(16, std::vector<uint8_t>(bytes[0].size()));
  std::vector<OnboardBlock> wanted;
  for (uint8_t i = 0; i < 16; ++i) wanted.push_back({testing::Key(i), 0, 1, &layout, back[i], i});
  const std::vector<Result<SourceTier>> tiers = link.FetchBatch(wanted);
  ASSERT_EQ(tiers.size(), 16u);
  for (size_t i = 0; i < 16; ++i) {
    ASSERT_TRUE(tiers[i].ok()) << "block " << i << ": " << tiers[i].status();
    EXPECT_EQ(*tiers[i], SourceTier::kHost);
    EXPECT_EQ(back[i], bytes[i]) << "block " << i;
  }

  ASSERT_TRUE(store->Remove(storage::BlockRef{testing::Key(5), StorageFormatTag(layout, 0), 1}).ok());
  const std::vector<Result<SourceTier>> after = link.FetchBatch(wanted);
  ASSERT_EQ(after.size(), 16u);
  EXPECT_EQ(after[5].status().code(), StatusCode::kNotFound);
  for (size_t i : {0, 4, 6, 15}) EXPECT_TRUE(after[i].ok()) << "block " << i << ": " << after[i].status();
}

// Through a worker: a pool of 8 blocks filled, all 8 evicted by one allocation and
// offloaded in one batch with 2 helpers, then onboarded in one batch, byte for byte.
TEST(TierLinkTest, AWorkersBatchesGoThroughTheHelpers) {
  auto store = HostStore(64);
  TierLink link({.store = store.get(), .threads = 2});
  auto worker = Worker::Create(WorkerOptions{.pools = {{TestLayout(), 8}}, .offload = &link, .onboard = &link}).value();
  std::vector<BlockKey> keys, other;
  for (uint64_t i = 0; i < 8; ++i) keys.push_back(testing::Key(i)), other.push_back(testing::Key(100 + i));
  coordinator::RetentionConfig keep{.ranges = {{.first_token = 0, .priority = 50}}};
  auto a = worker->Allocate({.client = 1, .sequence = 1, .root = testing::kRoot, .block_keys = keys,
                             .tokens = Tokens(0, 32)});
  ASSERT_TRUE(a.ok()) << a.status();
  for (uint8_t i = 0; i < 8; ++i) ASSERT_TRUE(worker->WriteBlock(0, a->block_table[i], testing::Pattern(i)).ok());
  ASSERT_TRUE(worker->Commit(1, 1, keys, Tokens(0, 32), keep).ok());
  ASSERT_TRUE(worker->Free(1, 1).ok());
  // Sequence 2 takes the whole pool: blocks 0-7 leave in one batch.
  ASSERT_TRUE(worker->Allocate({.client = 1, .sequence = 2, .root = testing::kRoot, .block_keys = other,
                                .tokens = Tokens(500, 32)}).ok());
  EXPECT_EQ(worker->Stats().offloaded_blocks, 8u);
  ASSERT_TRUE(worker->Free(1, 2).ok());
  // Sequence 3 asks for blocks 0-7 again: onboarded in one batch.
  auto c = worker->Allocate({.client = 1, .sequence = 3, .root = testing::kRoot, .block_keys = keys,
                             .tokens = Tokens(0, 32)});
  ASSERT_TRUE(c.ok()) << c.status();
  auto onboarded = worker->Onboard(1, 3, keys, keep);
  ASSERT_TRUE(onboarded.ok()) << onboarded.status();
  EXPECT_EQ(onboarded->onboarded_blocks, 8u);
  EXPECT_EQ(onboarded->from_host, 8u);
  std::vector<uint8_t> back(testing::Pattern(0).size());
  for (uint8_t i = 0; i < 8; ++i) {
    ASSERT_TRUE(worker->ReadBlock(0, c->block_table[i], back).ok());
    EXPECT_EQ(back, testing::Pattern(i)) << "block " << int(i);
  }
}

}  // namespace
}  // namespace kvtier::worker
