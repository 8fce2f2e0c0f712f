#include "storage/host_tier.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "storage/testing/blocks.h"
#include "storage/testing/host_tiers.h"

namespace kvtier::storage {
namespace {

using testing::MakeBlock;
using testing::TestBlock;

constexpr uint32_t kPage = testing::kTestPageBytes;

std::unique_ptr<HostTier> MakeTier(uint64_t pages, BatchEvictionHandler on_evict = nullptr,
                                   const Clock* clock = nullptr) {
  HostTierOptions options = testing::SmallHostTier(pages);
  options.on_evict = std::move(on_evict);
  if (clock != nullptr) options.clock = clock;
  auto tier = HostTier::Create(std::move(options));
  EXPECT_TRUE(tier.ok()) << tier.status();
  return std::move(tier).value();
}

std::vector<uint8_t> Read(HostTier& tier, const TestBlock& block) {
  std::vector<uint8_t> out(block.payload.size());
  auto header = tier.Get(block.ref(), out);
  EXPECT_TRUE(header.ok()) << header.status();
  return out;
}

TEST(HostTierTest, PutGetRoundTripsAcrossPages) {
  auto tier = MakeTier(8);
  // Block 1 spans three pages (the last one partly), block 2 fits in one.
  auto b1 = MakeBlock(1, 2 * kPage + 100);
  auto b2 = MakeBlock(2, 512);
  ASSERT_TRUE(tier->Put(b1.header, b1.payload).ok());
  ASSERT_TRUE(tier->Put(b2.header, b2.payload).ok());
  EXPECT_EQ(Read(*tier, b1), b1.payload);
  EXPECT_EQ(Read(*tier, b2), b2.payload);
  const TierStats stats = tier->Stats();
  EXPECT_EQ(stats.blocks, 2u);
  EXPECT_EQ(stats.bytes, 4u * kPage);
  EXPECT_EQ(stats.hits, 2u);
  EXPECT_EQ(stats.capacity_bytes, 8u * kPage);
  EXPECT_EQ(stats.bytes_written, 2u * kPage + 100 + 512) << "payload bytes, not pages";
  EXPECT_EQ(stats.bytes_read, 2u * kPage + 100 + 512);
}

// Copies run outside the tier's lock. Four readers get random blocks while a writer puts
// new ones into a tier of 24 pages (blocks of 3 pages: 8 fit), so blocks are evicted while
// readers copy them out, and pages freed by the last reader are taken by the next put.
// Every get that succeeds returns exactly its block's bytes; the rest are clean misses
// (or a retry while every page is in a copy); the page accounting ends where it began.
TEST(HostTierTest, ConcurrentGetsAndPutsNeverSeeAnotherBlocksBytes) {
  auto tier = MakeTier(24);
  std::vector<TestBlock> blocks;
  for (uint64_t id = 0; id < 64; ++id) blocks.push_back(MakeBlock(id, 2 * kPage + 1000));
  std::atomic<bool> done{false};
  std::atomic<uint64_t> hits{0}, wrong{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 4; ++r) {
    readers.emplace_back([&, r] {
      std::vector<uint8_t> out(blocks[0].payload.size());
      for (uint64_t i = static_cast<uint64_t>(r); !done.load();
           i = i * 6364136223846793005ull + 1442695040888963407ull) {
        const TestBlock& block = blocks[(i >> 33) % blocks.size()];
        auto header = tier->Get(block.ref(), out);
        if (!header.ok()) continue;
        hits.fetch_add(1);
        if (out != block.payload || header->key != block.header.key) wrong.fetch_add(1);
      }
    });
  }
  uint64_t refused = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  for (uint64_t n = 0; std::chrono::steady_clock::now() < until; ++n) {
    const TestBlock& block = blocks[n % blocks.size()];
    const Status put = tier->Put(block.header, block.payload);
    if (put.code() == StatusCode::kResourceExhausted)
      ++refused;
    else
      ASSERT_TRUE(put.ok()) << put;
  }
  done = true;
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_GT(hits.load(), 100u) << "the readers found blocks";
  const TierStats stats = tier->Stats();
  EXPECT_LE(stats.blocks, 8u);
  // With no copy in flight, pages are either a stored block's or free: 8 more blocks fit
  // once the stored ones are removed.
  for (const TestBlock& block : blocks) (void)tier->Remove(block.ref());
  EXPECT_EQ(tier->Stats().bytes, 0u);
  for (uint64_t id = 100; id < 108; ++id) {
    auto block = MakeBlock(id, 3 * kPage);
    ASSERT_TRUE(tier->Put(block.header, block.payload).ok())
        << "block " << id << " (" << refused << " refused)";
  }
  EXPECT_EQ(tier->Stats().evictions, stats.evictions)
      << "the 8 fit without evicting: no page leaked";
}

TEST(HostTierTest, EvictsLowestPriorityThenLeastRecentAndHandsTheBytesOn) {
  std::vector<std::pair<uint64_t, std::vector<uint8_t>>> evicted;
  std::vector<size_t> handed_per_call;
  auto tier = MakeTier(3, [&](std::span<const EvictedBlockView> victims) {
    handed_per_call.push_back(victims.size());
    for (const EvictedBlockView& victim : victims) {
      std::vector<uint8_t> bytes;
      for (auto range : victim.payload) bytes.insert(bytes.end(), range.begin(), range.end());
      evicted.emplace_back(victim.header->key.lo, std::move(bytes));
    }
  });
  // Three one-page blocks fill the tier: 0 (p50), 1 (p20), 2 (p50); block 0 is read again.
  auto b0 = MakeBlock(0, kPage, 50), b1 = MakeBlock(1, kPage, 20), b2 = MakeBlock(2, kPage, 50);
  for (auto* b : {&b0, &b1, &b2}) ASSERT_TRUE(tier->Put(b->header, b->payload).ok());
  Read(*tier, b0);
  // A two-page block needs two victims, handed on together: block 1 (lowest priority),
  // then block 2 (older than 0).
  auto big = MakeBlock(9, 2 * kPage);
  ASSERT_TRUE(tier->Put(big.header, big.payload).ok());
  EXPECT_EQ(handed_per_call, std::vector<size_t>{2});
  ASSERT_EQ(evicted.size(), 2u);
  EXPECT_EQ(evicted[0].first, 1u);
  EXPECT_EQ(evicted[0].second, b1.payload);
  EXPECT_EQ(evicted[1].first, 2u);
  EXPECT_EQ(evicted[1].second, b2.payload);
  EXPECT_FALSE(tier->Contains(b1.ref()));
  EXPECT_TRUE(tier->Contains(b0.ref()));
  EXPECT_EQ(tier->Stats().evictions_by_priority[20], 1u);
  EXPECT_EQ(tier->Stats().evictions_by_priority[50], 1u);
}

// A batch makes room for all its new blocks at once: blocks 0-3 fill a four-page tier,
// a batch of 4, 5 and 6 (and 4 again, a repeat) evicts 0, 1 and 2 in one hand-off. A
// batch larger than the tier (7-11, five pages, and 9 again) cannot have room made whole:
// its blocks go one by one, each evicting the oldest, so the last four stay.
TEST(HostTierTest, ABatchEvictsForAllItsBlocksInOneHandOff) {
  std::vector<std::vector<uint64_t>> calls;
  auto tier = MakeTier(4, [&](std::span<const EvictedBlockView> victims) {
    calls.emplace_back();
    for (const EvictedBlockView& victim : victims) calls.back().push_back(victim.header->key.lo);
  });
  std::vector<TestBlock> blocks;
  for (uint64_t id = 0; id < 12; ++id) blocks.push_back(MakeBlock(id, kPage));
  auto batch = [&](std::vector<uint64_t> ids) {
    std::vector<PutItem> items;
    for (uint64_t id : ids) items.push_back({blocks[id].header, blocks[id].payload});
    return tier->PutBatch(items);
  };
  for (const Status& put : batch({0, 1, 2, 3})) ASSERT_TRUE(put.ok()) << put;
  EXPECT_TRUE(calls.empty());
  for (const Status& put : batch({4, 5, 6, 4})) EXPECT_TRUE(put.ok()) << put;
  EXPECT_EQ(calls, (std::vector<std::vector<uint64_t>>{{0, 1, 2}}));
  for (uint64_t id : {3, 4, 5, 6})
    EXPECT_EQ(Read(*tier, blocks[id]), blocks[id].payload) << "block " << id;

  calls.clear();
  for (const Status& put : batch({7, 8, 9, 10, 11, 9})) EXPECT_TRUE(put.ok()) << put;
  size_t victims = 0;
  for (const auto& call : calls) victims += call.size();
  EXPECT_EQ(victims, 5u) << "3, 4, 5, 6 and then 7";
  EXPECT_FALSE(tier->Contains(blocks[7].ref()));
  for (uint64_t id : {8, 9, 10, 11})
    EXPECT_EQ(Read(*tier, blocks[id]), blocks[id].payload) << "block " << id;
  EXPECT_EQ(tier->Stats().blocks, 4u);
  EXPECT_EQ(tier->Stats().puts, 14u);
}

TEST(HostTierTest, AnotherSaltOrLayoutNeverFindsTheBlock) {
  auto tier = MakeTier(4);
  auto block = MakeBlock(5, 100, 35, /*salt_scope=*/1);
  ASSERT_TRUE(tier->Put(block.header, block.payload).ok());
  std::vector<uint8_t> out(100);
  BlockRef other_salt = block.ref();
  other_salt.salt_scope = 2;
  EXPECT_EQ(tier->Get(other_salt, out).status().code(), StatusCode::kNotFound);
  BlockRef other_layout = block.ref();
  other_layout.format_tag = "test-model|L2/H2/D64/T16/bf16/W0/S0|none";
  EXPECT_EQ(tier->Get(other_layout, out).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(tier->Remove(other_salt).code(), StatusCode::kNotFound);
  EXPECT_TRUE(tier->Contains(block.ref()));  // untouched by the foreign calls
  EXPECT_EQ(tier->Stats().misses, 2u);
}

TEST(HostTierTest, MalformedPutsAreRefusedAndStoreNothing) {
  auto tier = MakeTier(2);
  auto block = MakeBlock(1, 1000);
  auto truncated = tier->Put(block.header, std::span(block.payload).first(999));
  EXPECT_EQ(truncated.code(), StatusCode::kInvalidArgument);
  auto corrupt = block;
  corrupt.payload[3] ^= 0xFF;
  EXPECT_NE(tier->Put(corrupt.header, corrupt.payload).message().find("checksum"),
            std::string::npos);
  auto too_big = MakeBlock(2, 3 * kPage);
  EXPECT_EQ(tier->Put(too_big.header, too_big.payload).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(tier->Stats().blocks, 0u);
  std::vector<uint8_t> small(10);
  ASSERT_TRUE(tier->Put(block.header, block.payload).ok());
  EXPECT_EQ(tier->Get(block.ref(), small).status().code(), StatusCode::kInvalidArgument);
}

// A batch item whose caller has hashed the payload (checksum_checked) skips the tier's
// XXH3 pass and nothing else: a wrong size is still refused. Block 2's byte flipped after
// the header was made shows the pass is skipped (the caller's word is taken); without the
// flag the same bytes are refused.
TEST(HostTierTest, ACheckedBatchItemSkipsOnlyTheChecksumPass) {
  auto tier = MakeTier(4);
  const TestBlock first = MakeBlock(1, 1000);
  TestBlock flipped = MakeBlock(2, 1000);
  flipped.payload[3] ^= 0xFF;
  const std::vector<PutItem> checked = {{first.header, first.payload, true},
                                        {flipped.header, flipped.payload, true},
                                        {first.header, std::span(first.payload).first(999), true}};
  const std::vector<Status> results = tier->PutBatch(checked);
  EXPECT_TRUE(results[0].ok()) << results[0];
  EXPECT_TRUE(results[1].ok()) << results[1];
  EXPECT_NE(results[2].message().find("truncated"), std::string::npos) << results[2];
  EXPECT_EQ(Read(*tier, first), first.payload);
  TestBlock unchecked = MakeBlock(3, 1000);
  unchecked.payload[3] ^= 0xFF;
  const std::vector<Status> refused =
      tier->PutBatch(std::vector<PutItem>{{unchecked.header, unchecked.payload}});
  EXPECT_NE(refused[0].message().find("checksum"), std::string::npos) << refused[0];
  EXPECT_EQ(tier->Stats().blocks, 2u);
}

// With verify_on_get, bytes changed in RAM after the put (here: a bit flipped in the
// slab, reached through the pin hook as a CUDA host registration would see it) are never
// returned: the get reports data loss, the block is dropped and told to on_removed, and
// the next get is a plain miss. Block 2, untouched, still reads back.
TEST(HostTierTest, VerifyOnGetDropsABlockCorruptedInMemory) {
  std::span<uint8_t> slab;
  std::vector<uint64_t> removed;
  HostTierOptions options;
  options.capacity_bytes = 8 * kPage;
  options.page_bytes = kPage;
  options.try_huge_pages = false;
  options.verify_on_get = true;
  options.pin = [&](void* data, size_t bytes) {
    slab = {static_cast<uint8_t*>(data), bytes};
    return Status::Ok();
  };
  options.on_removed = [&](const BlockHeader& header) { removed.push_back(header.key.lo); };
  auto tier = HostTier::Create(options);
  ASSERT_TRUE(tier.ok()) << tier.status();
  const TestBlock bad = MakeBlock(1, 3 * kPage), good = MakeBlock(2, kPage);
  ASSERT_TRUE((*tier)->Put(bad.header, bad.payload).ok());
  ASSERT_TRUE((*tier)->Put(good.header, good.payload).ok());
  const auto at =
      std::search(slab.begin(), slab.end(), bad.payload.begin(), bad.payload.begin() + 64);
  ASSERT_NE(at, slab.end()) << "block 1's first bytes are in the slab";
  *(at + 100) ^= 0x5A;

  std::vector<uint8_t> out(bad.payload.size());
  const Result<BlockHeader> read = (*tier)->Get(bad.ref(), out);
  EXPECT_EQ(read.status().code(), StatusCode::kDataLoss) << read.status();
  EXPECT_NE(read.status().message().find(bad.header.key.ToHex()), std::string::npos)
      << read.status();
  EXPECT_EQ(removed, std::vector<uint64_t>{1});
  EXPECT_EQ((*tier)->Stats().checksum_failures, 1u);
  EXPECT_EQ((*tier)->Get(bad.ref(), out).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Read(**tier, good), good.payload);
}

TEST(HostTierTest, RepeatedPutUpdatesPolicyWithoutCopying) {
  auto tier = MakeTier(2);
  auto a = MakeBlock(1, kPage, 10), b = MakeBlock(2, kPage, 50);
  ASSERT_TRUE(tier->Put(a.header, a.payload).ok());
  ASSERT_TRUE(tier->Put(b.header, b.payload).ok());
  a.header.priority = 90;  // block 1 stored again, now with priority 90
  ASSERT_TRUE(tier->Put(a.header, a.payload).ok());
  auto c = MakeBlock(3, kPage);
  ASSERT_TRUE(tier->Put(c.header, c.payload).ok());
  EXPECT_TRUE(tier->Contains(a.ref()));  // 90 outranks 50
  EXPECT_FALSE(tier->Contains(b.ref()));
  EXPECT_EQ(tier->Peek(a.ref())->priority, 90);
}

TEST(HostTierTest, OptionsAreChecked) {
  HostTierOptions options;
  options.capacity_bytes = 100;
  options.try_huge_pages = false;
  EXPECT_NE(HostTier::Create(options).status().message().find("holds no page"), std::string::npos);
  options.capacity_bytes = 1 << 20;
  options.page_bytes = 1000;
  EXPECT_NE(HostTier::Create(options).status().message().find("multiple of 4096"),
            std::string::npos);
}

TEST(HostTierTest, PinHookSeesTheWholeSlab) {
  size_t pinned_bytes = 0, unpinned_bytes = 0;
  {
    HostTierOptions options;
    options.capacity_bytes = 16 * kPage;
    options.page_bytes = kPage;
    options.try_huge_pages = false;
    options.pin = [&](void*, size_t bytes) {
      pinned_bytes = bytes;
      return Status::Ok();
    };
    options.unpin = [&](void*, size_t bytes) { unpinned_bytes = bytes; };
    auto tier = HostTier::Create(options);
    ASSERT_TRUE(tier.ok());
    EXPECT_TRUE((*tier)->pinned());
  }
  EXPECT_EQ(pinned_bytes, 16u * kPage);
  EXPECT_EQ(unpinned_bytes, 16u * kPage);

  HostTierOptions failing;
  failing.capacity_bytes = kPage;
  failing.page_bytes = kPage;
  failing.pin = [](void*, size_t) { return UnavailableError("no device"); };
  EXPECT_NE(HostTier::Create(failing).status().message().find("pinning host memory"),
            std::string::npos);
}

}  // namespace
}  // namespace kvtier::storage
