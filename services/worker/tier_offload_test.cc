#include "services/worker/tier_offload.h"

#include <gtest/gtest.h>

#include <numeric>

namespace kvtier::worker {
namespace {

// 2 layers x 2 KV heads x 8 dims x 4 tokens x fp16 x K,V = 512 bytes per block.
KvLayout TestLayout() {
  return KvLayout::Create({.num_layers = 2, .num_kv_heads = 2, .head_dim = 8, .tokens_per_block = 4, .dtype = KvDtype::kFp16})
      .value();
}

std::vector<uint32_t> Tokens(uint32_t first, uint32_t count) {
  std::vector<uint32_t> t(count);
  std::iota(t.begin(), t.end(), first);
  return t;
}

TEST(TierOffloadTest, EvictedBlocksLandInTheHostTierWithFullHeaders) {
  storage::TieredStoreOptions store_options;
  store_options.host.emplace();
  store_options.host->capacity_bytes = 64 * 4096;
  store_options.host->page_bytes = 4096;
  store_options.host->try_huge_pages = false;
  auto store = storage::TieredStore::Create(std::move(store_options)).value();
  TierOffloadTarget target(store.get());
  auto worker = Worker::Create(WorkerOptions{.pools = {{TestLayout(), 1}}, .offload = &target}).value();

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
  auto header = store->Get(storage::BlockRef{a, format, 0xABC}, out);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(out, written);
  EXPECT_EQ(header->parent, root);
  EXPECT_EQ(header->priority, 60);
  // Another engine format or another tenant never sees it.
  EXPECT_FALSE(store->Contains(storage::BlockRef{a, StorageFormatTag(TestLayout(), 10), 0xABC}));
  EXPECT_FALSE(store->Contains(storage::BlockRef{a, format, 0xABD}));
}

}  // namespace
}  // namespace kvtier::worker
