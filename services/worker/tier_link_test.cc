#include "services/worker/tier_link.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <thread>

#include "services/worker/testing/worker_testing.h"
#include "tests/testing/test_util.h"

namespace kvtier::worker {
namespace {

using testing::TestLayout;
using testing::Tokens;

// A storage format tag is recognised in place: this layout and engine format only, the
// whole tag.
TEST(TierLinkTest, AStorageFormatTagIsRecognisedInPlace) {
  const std::string format = StorageFormatTag(TestLayout(), 9);
  EXPECT_TRUE(IsStorageFormatTag(format, TestLayout().Fingerprint(), 9));
  EXPECT_FALSE(IsStorageFormatTag(format, TestLayout().Fingerprint(), 10));
  EXPECT_FALSE(IsStorageFormatTag(format, "L9/H9/D9/T4/fp16/W0/S0", 9));
  EXPECT_FALSE(IsStorageFormatTag(format + "0", TestLayout().Fingerprint(), 9));
  EXPECT_FALSE(IsStorageFormatTag(TestLayout().Fingerprint() + "/W8" + "|f0000000000000009",
                                  TestLayout().Fingerprint(), 9))
      << "another layout whose fingerprint begins with this one's";
  std::string other_engine = format;
  other_engine.back() = '8';
  EXPECT_FALSE(IsStorageFormatTag(other_engine, TestLayout().Fingerprint(), 9));
}

TEST(TierLinkTest, EvictedBlocksLandInTheHostTierWithFullHeaders) {
  storage::TieredStoreOptions store_options;
  store_options.host.emplace();
  store_options.host->capacity_bytes = 64 * 4096;
  store_options.host->page_bytes = 4096;
  store_options.host->try_huge_pages = false;
  auto store = storage::TieredStore::Create(std::move(store_options)).value();
  TierLink link({.store = store.get()});
  auto worker = Worker::Create(
                    WorkerOptions{.pools = {{TestLayout(), 1}}, .offload = &link, .onboard = &link})
                    .value();

  // Block A (priority 60, tenant scope 0xABC, format tag 9) is committed, written and released.
  const BlockKey root{3, 3}, a{0x2001, 1}, b{0x2002, 2};
  kvtier::RetentionConfig keep{.ranges = {{.first_token = 0, .priority = 60}}};
  ASSERT_TRUE(worker
                  ->Allocate({.client = 1,
                              .sequence = 1,
                              .root = root,
                              .salt_scope = 0xABC,
                              .format_tag = 9,
                              .block_keys = std::vector<BlockKey>{a},
                              .tokens = Tokens(0, 4)})
                  .ok());
  std::span<uint8_t> pool = worker->bytes().Host(0);
  for (size_t i = 0; i < 512; ++i) pool[i] = static_cast<uint8_t>(i * 7);
  const std::vector<uint8_t> written(pool.begin(), pool.begin() + 512);
  ASSERT_TRUE(worker->Commit(1, 1, std::vector<BlockKey>{a}, Tokens(0, 4), keep).ok());
  ASSERT_TRUE(worker->Free(1, 1).ok());
  // A new prompt needs the pool's only block: A is offloaded into the store.
  ASSERT_TRUE(worker
                  ->Allocate({.client = 1,
                              .sequence = 2,
                              .root = root,
                              .block_keys = std::vector<BlockKey>{b},
                              .tokens = Tokens(100, 4)})
                  .ok());
  EXPECT_EQ(worker->Stats().offloaded_blocks, 1u);

  const std::string format = StorageFormatTag(TestLayout(), 9);
  EXPECT_EQ(format, TestLayout().Fingerprint() + "|f0000000000000009");
  std::vector<uint8_t> out(512);
  auto hit = store->Get(storage::BlockRef{a, format, 0xABC}, out);
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_EQ(out, written);
  EXPECT_EQ(hit->tier, kvtier::Tier::kHost);
  EXPECT_EQ(hit->header.parent, root);
  EXPECT_TRUE(hit->header.first_in_chain);
  EXPECT_EQ(hit->header.priority, 60);
  // Another engine format or another tenant never sees it.
  EXPECT_FALSE(store->Contains(storage::BlockRef{a, StorageFormatTag(TestLayout(), 10), 0xABC}));
  EXPECT_FALSE(store->Contains(storage::BlockRef{a, format, 0xABD}));

  // Sequence 2 is done; a third prompt [A, C] finds A in neither the pool (B holds the
  // only block... freed now) nor computed: onboard brings A back from the host tier.
  ASSERT_TRUE(worker->Free(1, 2).ok());
  auto again = worker->Allocate({.client = 1,
                                 .sequence = 3,
                                 .root = root,
                                 .salt_scope = 0xABC,
                                 .format_tag = 9,
                                 .block_keys = std::vector<BlockKey>{a},
                                 .tokens = Tokens(0, 4)});
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
  EXPECT_TRUE(
      std::equal(written.begin(), written.end(), pool.begin() + static_cast<std::ptrdiff_t>(at)));
  EXPECT_EQ(worker->Stats().onboarded_blocks, 1u);
  EXPECT_EQ(worker->Stats().onboarded_bytes, 512u);
  // A is committed again: the pool announces it and a lookup finds it locally.
  EXPECT_EQ(worker->LookupLocal(0, root, std::vector<BlockKey>{a}).value(), 1u);
  // Onboarding again fetches nothing more.
  EXPECT_EQ(worker->Onboard(1, 3, std::vector<BlockKey>{a}, {})->onboarded_blocks, 0u);
  // Landed in the pool, A has left the host tier: its room goes to blocks no pool holds.
  EXPECT_FALSE(store->Contains(storage::BlockRef{a, format, 0xABC}));
  EXPECT_EQ(store->Stats().onboarded, 1u);
  // Evicted from the pool again (by B), A is offloaded back.
  ASSERT_TRUE(worker->Free(1, 3).ok());
  ASSERT_TRUE(worker
                  ->Allocate({.client = 1,
                              .sequence = 4,
                              .root = root,
                              .block_keys = std::vector<BlockKey>{b},
                              .tokens = Tokens(100, 4)})
                  .ok());
  hit = store->Get(storage::BlockRef{a, format, 0xABC}, out);
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_EQ(out, written);
}

TEST(TierLinkTest, OnboardStopsAtTheFirstBlockTheStoreLacks) {
  storage::TieredStoreOptions store_options;
  store_options.host.emplace();
  store_options.host->capacity_bytes = 16 * 4096;
  store_options.host->page_bytes = 4096;
  store_options.host->try_huge_pages = false;
  auto store = storage::TieredStore::Create(std::move(store_options)).value();
  TierLink link({.store = store.get()});
  auto worker = Worker::Create(
                    WorkerOptions{.pools = {{TestLayout(), 4}}, .offload = &link, .onboard = &link})
                    .value();
  // The store holds blocks 0 and 2 of a three-block prompt, not block 1.
  const BlockKey root{3, 3};
  const std::vector<BlockKey> keys = {{0x3000, 0}, {0x3000, 1}, {0x3000, 2}};
  const std::vector<uint8_t> bytes(512, 0x5A);
  const KvLayout layout = TestLayout();
  for (size_t i : {0, 2}) {
    ASSERT_TRUE(link.Offload(OffloadBlock{keys[i], i == 0 ? root : keys[i - 1], i == 0, 0, 1, 50,
                                          &layout, bytes})
                    .ok());
  }
  ASSERT_TRUE(worker
                  ->Allocate({.client = 1,
                              .sequence = 1,
                              .root = root,
                              .salt_scope = 1,
                              .block_keys = keys,
                              .tokens = Tokens(0, 12)})
                  .ok());
  auto onboarded = worker->Onboard(1, 1, keys, {});
  ASSERT_TRUE(onboarded.ok()) << onboarded.status();
  EXPECT_EQ(onboarded->onboarded_blocks, 1u) << "block 1 is missing, so block 2 cannot be used";
  EXPECT_EQ(worker->LookupLocal(0, root, keys).value(), 1u);
  EXPECT_EQ(worker->Onboard(1, 1, std::vector<BlockKey>(4, keys[0]), {}).status().code(),
            StatusCode::kInvalidArgument);
}

// Blocks 0..n-1 of one chain (priority 50, salt scope 1), each with bytes of its own, as
// victims of `layout`.
struct Chain {
  Chain(uint8_t n, const KvLayout& layout) {
    for (uint8_t i = 0; i < n; ++i) bytes.push_back(testing::Pattern(i));
    for (uint8_t i = 0; i < n; ++i) {
      victims.push_back({testing::Key(i), i == 0 ? testing::kRoot : testing::Key(i - 1), i == 0, 0,
                         1, 50, &layout, bytes[i]});
    }
  }
  // Blocks 0..n-1 asked back, each into its own buffer of `back` (made here).
  std::vector<OnboardBlock> Wanted(uint8_t n, std::vector<std::vector<uint8_t>>& back) const {
    back.assign(n, std::vector<uint8_t>(bytes[0].size()));
    std::vector<OnboardBlock> wanted;
    for (uint8_t i = 0; i < n; ++i)
      wanted.push_back({testing::Key(i), 0, 1, victims[i].layout, back[i], i});
    return wanted;
  }
  // Every block fetched from `tier` with its own bytes.
  void ExpectFetched(const std::vector<Result<SourceTier>>& tiers,
                     const std::vector<std::vector<uint8_t>>& back, SourceTier tier) const {
    ASSERT_EQ(tiers.size(), back.size());
    for (size_t i = 0; i < tiers.size(); ++i) {
      ASSERT_TRUE(tiers[i].ok()) << "block " << i << ": " << tiers[i].status();
      EXPECT_EQ(*tiers[i], tier) << "block " << i;
      EXPECT_EQ(back[i], bytes[i]) << "block " << i;
    }
  }

  std::vector<std::vector<uint8_t>> bytes;
  std::vector<OffloadBlock> victims;
};

// A store of `pages` 4 KiB host pages.
storage::TieredStoreOptions HostOptions(uint64_t pages) {
  storage::TieredStoreOptions options;
  options.host.emplace();
  options.host->capacity_bytes = pages * 4096;
  options.host->page_bytes = 4096;
  options.host->try_huge_pages = false;
  return options;
}
std::unique_ptr<storage::TieredStore> HostStore(uint64_t pages) {
  return storage::TieredStore::Create(HostOptions(pages)).value();
}

// The options with a disk tier of 1 MiB in `dir`.
storage::TieredStoreOptions WithDisk(storage::TieredStoreOptions options,
                                     const kvtier::testing::TempDir& dir) {
  options.disk.emplace();
  options.disk->path = dir.path();
  options.disk->capacity_bytes = 1 << 20;
  options.disk->memtable_bytes = 1 << 20;
  return options;
}

// A store whose put of block 0 stalls (its event waits) until Release: the staging's
// thread is then inside that put, and what is staged behind it waits.
struct StallingStore {
  explicit StallingStore(storage::TieredStoreOptions options) {
    options.on_event = [this](const storage::StoreEvent& e) {
      if (e.kind != storage::StoreEvent::Kind::kStored || e.header.key != testing::Key(0)) return;
      in_put = true;
      kvtier::testing::WaitUntil([this] { return released.load(); });
    };
    store = storage::TieredStore::Create(std::move(options)).value();
  }
  [[nodiscard]] bool WaitForThePut() const {
    return kvtier::testing::WaitUntil([this] { return in_put.load(); });
  }
  void Release() { released = true; }

  std::atomic<bool> in_put{false}, released{false};
  std::unique_ptr<storage::TieredStore> store;
};

// Sixteen victims offloaded in one batch by the caller and 3 helpers, then fetched back
// in one batch: every block is stored with its own bytes and comes back byte for byte.
// With block 5 gone from the store, a batch fetch reports it missing and still brings
// the others (the helpers fetch in parallel; Onboard uses the leading run).
TEST(TierLinkTest, BatchesAreSplitAmongHelpersAndEachBlockKeepsItsBytes) {
  auto store = HostStore(64);
  TierLink link({.store = store.get(), .threads = 3});
  const KvLayout layout = TestLayout();
  const Chain chain(16, layout);
  for (const Status& taken : link.OffloadBatch(chain.victims)) EXPECT_TRUE(taken.ok()) << taken;

  std::vector<std::vector<uint8_t>> back;
  const std::vector<OnboardBlock> wanted = chain.Wanted(16, back);
  chain.ExpectFetched(link.FetchBatch(wanted), back, SourceTier::kHost);

  ASSERT_TRUE(
      store->Remove(storage::BlockRef{testing::Key(5), StorageFormatTag(layout, 0), 1}).ok());
  const std::vector<Result<SourceTier>> after = link.FetchBatch(wanted);
  ASSERT_EQ(after.size(), 16u);
  EXPECT_EQ(after[5].status().code(), StatusCode::kNotFound);
  for (size_t i : {0, 4, 6, 15})
    EXPECT_TRUE(after[i].ok()) << "block " << i << ": " << after[i].status();
}

// With staging for 4 blocks, a batch of 6: 4 are staged and stored behind the call, 2
// stored before it returns. All 6 are fetched back with their bytes at once, and once
// the staging is flushed the store holds every one.
TEST(TierLinkTest, StagedOffloadsAreFetchedAtOnceAndStoredBehind) {
  auto store = HostStore(64);
  const KvLayout layout = TestLayout();
  TierLink link({.store = store.get(), .staging_bytes = 4 * layout.bytes_per_block()});
  const Chain chain(6, layout);
  for (const Status& taken : link.OffloadBatch(chain.victims)) EXPECT_TRUE(taken.ok()) << taken;
  std::vector<std::vector<uint8_t>> back;
  const std::vector<OnboardBlock> wanted = chain.Wanted(6, back);
  chain.ExpectFetched(link.FetchBatch(wanted), back, SourceTier::kHost);

  link.Flush();
  const OffloadQueueStats stats = link.StagingStats();
  EXPECT_EQ(stats.staged, 4u);
  EXPECT_EQ(stats.no_room, 2u);
  EXPECT_EQ(stats.stored, 4u);
  EXPECT_EQ(stats.staged_bytes, 0u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_TRUE(store->Contains(storage::BlockRef{testing::Key(i), StorageFormatTag(layout, 0), 1}))
        << "block " << i;
  }
}

// While the store is still taking a staged batch (its event of block 0 holds the put),
// a fetch of those blocks is answered from the staging, with their bytes.
TEST(TierLinkTest, AFetchFindsBlocksStillStaged) {
  StallingStore stalling(HostOptions(64));
  const KvLayout layout = TestLayout();
  TierLink link({.store = stalling.store.get(), .staging_bytes = 8 * layout.bytes_per_block()});
  const Chain chain(2, layout);
  for (const Status& taken : link.OffloadBatch(chain.victims)) EXPECT_TRUE(taken.ok()) << taken;
  ASSERT_TRUE(stalling.WaitForThePut());
  std::vector<std::vector<uint8_t>> back;
  chain.ExpectFetched(link.FetchBatch(chain.Wanted(2, back)), back, SourceTier::kHost);
  EXPECT_EQ(link.StagingStats().served, 2u);
  stalling.Release();
  link.Flush();
  EXPECT_EQ(link.StagingStats().stored, 2u);
}

// Blocks fetched from the staging and landed in a pool are not stored behind it: the
// pool holds them. Block 0's put holds the staging's thread; blocks 1 and 2 wait behind
// it, are fetched back from the staging (with 0) and landed. The store is a disk tier
// alone (a host tier's lock, which 0's put holds while its event waits, would stall the
// landing, which takes it to move landed host blocks out), so 0, stored, stays stored:
// the move out of the host tier is OffloadQueueTest's.
TEST(TierLinkTest, StagedBlocksLandedInAPoolAreNotStored) {
  kvtier::testing::TempDir dir;
  StallingStore stalling(WithDisk({}, dir));
  storage::TieredStore* store = stalling.store.get();
  const KvLayout layout = TestLayout();
  TierLink link({.store = store, .staging_bytes = 8 * layout.bytes_per_block()});
  const Chain chain(3, layout);
  ASSERT_TRUE(link.Offload(chain.victims[0]).ok());
  ASSERT_TRUE(stalling.WaitForThePut());
  for (const Status& taken : link.OffloadBatch(std::span(chain.victims).subspan(1)))
    EXPECT_TRUE(taken.ok()) << taken;
  std::vector<std::vector<uint8_t>> back;
  const std::vector<OnboardBlock> wanted = chain.Wanted(3, back);
  chain.ExpectFetched(link.FetchBatch(wanted), back, SourceTier::kHost);
  link.Landed(wanted, std::vector<SourceTier>(3, SourceTier::kHost));
  stalling.Release();
  link.Flush();

  const std::string format = StorageFormatTag(layout, 0);
  EXPECT_TRUE(store->Contains(storage::BlockRef{testing::Key(0), format, 1}))
      << "being stored when it landed";
  for (uint8_t i : {1, 2})
    EXPECT_FALSE(store->Contains(storage::BlockRef{testing::Key(i), format, 1})) << int{i};
  const OffloadQueueStats stats = link.StagingStats();
  EXPECT_EQ(stats.served, 3u);
  EXPECT_EQ(stats.withdrawn, 3u);
  EXPECT_EQ(stats.stored, 0u);
}

// A store of four 4 KiB host pages over a disk tier in `dir`.
std::unique_ptr<storage::TieredStore> HostOverDiskStore(const kvtier::testing::TempDir& dir) {
  return storage::TieredStore::Create(WithDisk(HostOptions(4), dir)).value();
}

// Each batch is one store put, so that what it displaces from the host tier goes down to
// disk in one write: victims 0-3 fill the host tier, victims 4-7 move them down (one disk
// write, not four). Fetching 0-3 back reads them from disk and leaves them there: the
// pool holds them now, so the host tier keeps 4-7 (no promotion, nothing moved down).
TEST(TierLinkTest, ABatchsDisplacedBlocksGoDownToDiskInOneWrite) {
  kvtier::testing::TempDir dir;
  auto store = HostOverDiskStore(dir);
  TierLink link({.store = store.get()});
  const KvLayout layout = TestLayout();
  const Chain chain(8, layout);
  const std::span<const OffloadBlock> all(chain.victims);
  for (const Status& taken : link.OffloadBatch(all.first(4))) ASSERT_TRUE(taken.ok()) << taken;
  EXPECT_EQ(store->Stats().disk->put_batches, 0u);
  for (const Status& taken : link.OffloadBatch(all.last(4))) ASSERT_TRUE(taken.ok()) << taken;
  EXPECT_EQ(store->Stats().demoted, 4u);
  EXPECT_EQ(store->Stats().disk->put_batches, 1u) << "victims 0-3 went down together";

  std::vector<std::vector<uint8_t>> back;
  chain.ExpectFetched(link.FetchBatch(chain.Wanted(4, back)), back, SourceTier::kDisk);
  EXPECT_EQ(store->Stats().promoted, 0u);
  EXPECT_EQ(store->Stats().demoted, 4u);
  EXPECT_EQ(store->Stats().disk->put_batches, 1u);
  std::set<uint64_t> in_host;
  for (const auto& [tier, header] : store->Holdings()) {
    if (tier == kvtier::Tier::kHost) in_host.insert(header.key.lo);
  }
  EXPECT_EQ(in_host, (std::set<uint64_t>{testing::Key(4).lo, testing::Key(5).lo, testing::Key(6).lo,
                                         testing::Key(7).lo}));
}

// A batch whose blocks come from engines of two format tags (0, 9, 9, 0): each block is
// stored, and fetched back, under its own.
TEST(TierLinkTest, EachBlockOfABatchKeepsItsOwnFormat) {
  auto store = HostStore(64);
  TierLink link({.store = store.get()});
  const KvLayout layout = TestLayout();
  Chain chain(4, layout);
  const uint64_t tags[] = {0, 9, 9, 0};
  for (size_t i = 0; i < 4; ++i) chain.victims[i].format_tag = tags[i];
  for (const Status& taken : link.OffloadBatch(chain.victims)) ASSERT_TRUE(taken.ok()) << taken;
  for (size_t i = 0; i < 4; ++i) {
    const BlockKey key = testing::Key(i);
    EXPECT_TRUE(store->Contains(storage::BlockRef{key, StorageFormatTag(layout, tags[i]), 1}))
        << "block " << i;
    EXPECT_FALSE(store->Contains(storage::BlockRef{key, StorageFormatTag(layout, 9 - tags[i]), 1}))
        << "block " << i;
  }
  std::vector<std::vector<uint8_t>> back;
  std::vector<OnboardBlock> wanted = chain.Wanted(4, back);
  for (size_t i = 0; i < 4; ++i) wanted[i].format_tag = tags[i];
  chain.ExpectFetched(link.FetchBatch(wanted), back, SourceTier::kHost);
}

// Through a worker: a pool of 8 blocks filled, all 8 evicted by one allocation and
// offloaded in one batch with 2 helpers, then onboarded in one batch, byte for byte.
TEST(TierLinkTest, AWorkersBatchesGoThroughTheHelpers) {
  auto store = HostStore(64);
  TierLink link({.store = store.get(), .threads = 2});
  auto worker = Worker::Create(
                    WorkerOptions{.pools = {{TestLayout(), 8}}, .offload = &link, .onboard = &link})
                    .value();
  std::vector<BlockKey> keys, other;
  for (uint64_t i = 0; i < 8; ++i)
    keys.push_back(testing::Key(i)), other.push_back(testing::Key(100 + i));
  kvtier::RetentionConfig keep{.ranges = {{.first_token = 0, .priority = 50}}};
  auto a = worker->Allocate({.client = 1,
                             .sequence = 1,
                             .root = testing::kRoot,
                             .block_keys = keys,
                             .tokens = Tokens(0, 32)});
  ASSERT_TRUE(a.ok()) << a.status();
  for (uint8_t i = 0; i < 8; ++i)
    ASSERT_TRUE(worker->bytes().Write(0, a->block_table[i], testing::Pattern(i)).ok());
  ASSERT_TRUE(worker->Commit(1, 1, keys, Tokens(0, 32), keep).ok());
  ASSERT_TRUE(worker->Free(1, 1).ok());
  // Sequence 2 takes the whole pool: blocks 0-7 leave in one batch.
  ASSERT_TRUE(worker
                  ->Allocate({.client = 1,
                              .sequence = 2,
                              .root = testing::kRoot,
                              .block_keys = other,
                              .tokens = Tokens(500, 32)})
                  .ok());
  EXPECT_EQ(worker->Stats().offloaded_blocks, 8u);
  ASSERT_TRUE(worker->Free(1, 2).ok());
  // Sequence 3 asks for blocks 0-7 again: onboarded in one batch.
  auto c = worker->Allocate({.client = 1,
                             .sequence = 3,
                             .root = testing::kRoot,
                             .block_keys = keys,
                             .tokens = Tokens(0, 32)});
  ASSERT_TRUE(c.ok()) << c.status();
  auto onboarded = worker->Onboard(1, 3, keys, keep);
  ASSERT_TRUE(onboarded.ok()) << onboarded.status();
  EXPECT_EQ(onboarded->onboarded_blocks, 8u);
  EXPECT_EQ(onboarded->from_host, 8u);
  std::vector<uint8_t> back(testing::Pattern(0).size());
  for (uint8_t i = 0; i < 8; ++i) {
    ASSERT_TRUE(worker->bytes().Read(0, c->block_table[i], back).ok());
    EXPECT_EQ(back, testing::Pattern(i)) << "block " << int(i);
  }
}

TEST(TierLinkThreadsTest, ASetCountIsKeptAndZeroTakesTheMachinesDefault) {
  EXPECT_EQ(TierLinkThreads(7), 7u);
  EXPECT_EQ(TierLinkThreads(0), DefaultTierLinkThreads(std::thread::hardware_concurrency()));
  // None on dev's 2 threads, a quarter below 16, half from 16, at most 8.
  EXPECT_EQ(DefaultTierLinkThreads(2), 0u);
  EXPECT_EQ(DefaultTierLinkThreads(8), 2u);
  EXPECT_EQ(DefaultTierLinkThreads(12), 3u);
  EXPECT_EQ(DefaultTierLinkThreads(16), 8u);
  EXPECT_EQ(DefaultTierLinkThreads(64), 8u);
}

// Engines choose their format tags, and the process interns the storage tags made of
// them: past storage::FormatTag::kMaxFormatTags distinct tags, an offload under a new one
// is refused (kResourceExhausted, not stored, not staged), while blocks of a format in
// use are stored as ever. Keep it the file's last test: it fills this process's table.
TEST(TierLinkTest, AnOffloadUnderANewFormatPastTheBoundIsRefused) {
  auto store = HostStore(64);
  const KvLayout layout = TestLayout();
  TierLink link({.store = store.get(), .staging_bytes = 4 * layout.bytes_per_block()});
  Chain chain(3, layout);  // engine format tag 0
  ASSERT_TRUE(link.Offload(chain.victims[0]).ok());
  for (size_t i = 0; storage::FormatTag::Intern("flood-" + std::to_string(i)).ok(); ++i) {
  }
  chain.victims[1].format_tag = 77;  // a format this process never saw
  const std::vector<Status> taken = link.OffloadBatch(std::span(chain.victims).subspan(1));
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_EQ(taken[0].code(), StatusCode::kResourceExhausted) << taken[0];
  EXPECT_TRUE(taken[1].ok()) << taken[1];
  link.Flush();
  EXPECT_EQ(link.StagingStats().staged, 2u) << "blocks 0 and 2";
  EXPECT_FALSE(
      store->Contains(storage::BlockRef{testing::Key(1), StorageFormatTag(layout, 77), 1}));
  EXPECT_TRUE(store->Contains(storage::BlockRef{testing::Key(2), StorageFormatTag(layout, 0), 1}));
}

}  // namespace
}  // namespace kvtier::worker
