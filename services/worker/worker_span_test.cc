// A sequence spanning a worker's pools (a Gemma-like model: full-attention layers in one
// pool, 8-token-window layers in another): one call covers every pool, the reuse is what
// all of them serve, and a refusal in one pool changes none.
#include <gtest/gtest.h>

#include <vector>

#include "services/worker/testing/worker_testing.h"
#include "services/worker/worker.h"

namespace kvtier::worker {
namespace {

using testing::Key;
using testing::kRoot;
using testing::MapTier;
using testing::TestLayout;
using testing::Tokens;

KvLayout WindowLayout() {
  return KvLayout::Create({.num_layers = 2,
                           .num_kv_heads = 2,
                           .head_dim = 8,
                           .tokens_per_block = 4,
                           .dtype = KvDtype::kFp16,
                           .attention_window = 8,
                           .sink_tokens = 4})
      .value();
}

constexpr uint32_t kBothPools[] = {0, 1};

std::vector<BlockKey> Keys(uint64_t first, size_t count) {
  std::vector<BlockKey> keys;
  for (size_t i = 0; i < count; ++i) keys.push_back(Key(first + i));
  return keys;
}

std::unique_ptr<Worker> GemmaLikeWorker(uint32_t full_blocks, uint32_t window_blocks,
                                        MapTier* tier = nullptr) {
  return Worker::Create({.pools = {{TestLayout(), full_blocks}, {WindowLayout(), window_blocks}},
                         .offload = tier,
                         .onboard = tier})
      .value();
}

AllocateRequest Spanning(SequenceId sequence, std::span<const BlockKey> keys,
                         std::span<const uint32_t> tokens) {
  return {.client = 1,
          .sequence = sequence,
          .pool_ids = kBothPools,
          .root = kRoot,
          .block_keys = keys,
          .tokens = tokens};
}

TEST(WorkerSpanTest, OneSequenceHasATableInEachPoolAndCommitsInBoth) {
  auto worker = GemmaLikeWorker(16, 16);
  const std::vector<BlockKey> keys = Keys(0, 6);
  const std::vector<uint32_t> tokens = Tokens(0, 26);
  auto a = worker->Allocate(Spanning(1, keys, tokens));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_EQ(a->tables.size(), 2u);
  EXPECT_EQ(a->tables[0].pool_id, 0u);
  EXPECT_EQ(a->tables[1].pool_id, 1u);
  EXPECT_EQ(a->tables[0].block_table.size(), 7u);
  EXPECT_EQ(a->tables[1].block_table.size(), 7u);
  EXPECT_EQ(a->block_table, a->tables[0].block_table);
  EXPECT_EQ(worker->Sequence(1, 1).value().pools, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(worker->Commit(1, 1, keys, tokens, {}).value(), 6u) << "six keys, in two pools";
  std::vector<uint32_t> stored_in(2, 0);
  for (const WorkerEvent& e : worker->TakeEvents())
    stored_in[e.pool_id] += e.kind == WorkerEvent::Kind::kStored;
  EXPECT_EQ(stored_in, (std::vector<uint32_t>{6, 6}));
  const WorkerStats stats = worker->Stats();
  EXPECT_EQ(stats.pools[0].in_use, 7u);
  EXPECT_EQ(stats.pools[1].in_use, 7u);
  ASSERT_TRUE(worker->Free(1, 1).ok());
  EXPECT_EQ(worker->Stats().pools[1].in_use, 0u) << "Free lets go in every pool";
}

// The windowed pool loses the blocks between its sink and its last window; the full pool
// keeps all. The prompt is served from both: the windowed table skips the gap.
TEST(WorkerSpanTest, TheReuseIsThePrefixEveryPoolServes) {
  auto worker = GemmaLikeWorker(16, 8);
  const std::vector<BlockKey> keys = Keys(0, 6);
  const std::vector<uint32_t> tokens = Tokens(0, 24);
  ASSERT_TRUE(worker->Allocate(Spanning(1, keys, tokens)).ok());
  ASSERT_TRUE(worker->Commit(1, 1, keys, tokens, {}).ok());
  ASSERT_TRUE(worker->Free(1, 1).ok());
  // Another prompt in the windowed pool alone takes 5 of its 8 blocks: 2 free, 3 evicted.
  const std::vector<BlockKey> other = Keys(100, 5);
  ASSERT_TRUE(worker
                  ->Allocate({.client = 1,
                              .sequence = 2,
                              .pool_id = 1,
                              .root = kRoot,
                              .block_keys = other,
                              .num_tokens = 20})
                  .ok());
  ASSERT_TRUE(worker->Free(1, 2).ok());
  EXPECT_EQ(worker->LookupLocal(kBothPools, kRoot, keys).value(), 6u);
  EXPECT_EQ(worker->LookupLocal(0, kRoot, keys).value(), 6u);

  const std::vector<uint32_t> longer = Tokens(0, 26);
  auto b = worker->Allocate(Spanning(3, keys, longer));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->reused_blocks, 6u);
  const std::vector<BlockId>& windowed = b->tables[1].block_table;
  ASSERT_EQ(windowed.size(), 7u);
  EXPECT_NE(windowed[0], kNoBlock) << "the sink";
  for (size_t i = 1; i < 4; ++i) EXPECT_EQ(windowed[i], kNoBlock) << "block " << i;
  EXPECT_NE(windowed[4], kNoBlock);
  EXPECT_NE(windowed[5], kNoBlock);
  for (const BlockId id : b->tables[0].block_table) EXPECT_NE(id, kNoBlock);
}

TEST(WorkerSpanTest, APrefixOnePoolLacksIsReusedByNone) {
  for (const uint32_t computed_in : {0u, 1u}) {
    SCOPED_TRACE("only pool " + std::to_string(computed_in) + " computed the prompt");
    auto worker = GemmaLikeWorker(16, 16);
    const std::vector<BlockKey> keys = Keys(0, 4);
    const std::vector<uint32_t> tokens = Tokens(0, 16);
    ASSERT_TRUE(worker
                    ->Allocate({.client = 1,
                                .sequence = 1,
                                .pool_id = computed_in,
                                .root = kRoot,
                                .block_keys = keys,
                                .tokens = tokens})
                    .ok());
    ASSERT_TRUE(worker->Commit(1, 1, keys, tokens, {}).ok());
    EXPECT_EQ(worker->LookupLocal(computed_in, kRoot, keys).value(), 4u);
    EXPECT_EQ(worker->LookupLocal(kBothPools, kRoot, keys).value(), 0u);
    auto a = worker->Allocate(Spanning(2, keys, tokens));
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->reused_blocks, 0u);
    EXPECT_EQ(a->reused_tokens, 0u) << "no partial reuse either: the other pool has none";
    const std::vector<BlockId> first = worker->Extend(1, 1, 16).value().block_table;
    for (const PoolTable& table : a->tables) {
      if (table.pool_id == computed_in) {
        EXPECT_NE(table.block_table[0], first[0]) << "blank blocks, not the cached ones";
      }
    }
  }
}

TEST(WorkerSpanTest, ARefusalInOnePoolChangesNoPool) {
  auto worker = GemmaLikeWorker(16, 4);
  const std::vector<BlockKey> keys = Keys(0, 6);
  auto refused = worker->Allocate(Spanning(1, keys, Tokens(0, 24)));
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(worker->Stats().pools[0].in_use, 0u) << "nothing taken in the pool with room";
  EXPECT_FALSE(worker->Sequence(1, 1).ok());

  auto a = worker->Allocate(Spanning(2, Keys(0, 3), Tokens(0, 12)));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(worker->Extend(1, 2, 20).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(worker->Stats().pools[0].in_use, 3u) << "the refused Extend grew neither pool";
  auto grown = worker->Extend(1, 2, 16);
  ASSERT_TRUE(grown.ok());
  EXPECT_EQ(grown->tables.size(), 2u);
  EXPECT_EQ(grown->tables[0].block_table.size(), 4u);
}

TEST(WorkerSpanTest, BadSpansAreRefusedByName) {
  auto worker = GemmaLikeWorker(8, 8);
  const std::vector<BlockKey> keys = Keys(0, 1);
  const std::vector<uint32_t> tokens = Tokens(0, 4);
  AllocateRequest request = Spanning(1, keys, tokens);
  const uint32_t twice[] = {1, 1};
  request.pool_ids = twice;
  auto repeated = worker->Allocate(request);
  EXPECT_EQ(repeated.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(repeated.status().message().find("pool 1 is listed twice"), std::string::npos);
  const uint32_t unknown[] = {0, 7};
  request.pool_ids = unknown;
  EXPECT_EQ(worker->Allocate(request).status().code(), StatusCode::kNotFound);

  auto other_size = Worker::Create({.pools = {{TestLayout(), 8},
                                              {KvLayout::Create({.num_layers = 2,
                                                                 .num_kv_heads = 2,
                                                                 .head_dim = 8,
                                                                 .tokens_per_block = 8,
                                                                 .dtype = KvDtype::kFp16})
                                                   .value(),
                                               8}}})
                        .value();
  auto sizes = other_size->Allocate(Spanning(1, keys, tokens));
  EXPECT_EQ(sizes.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(sizes.status().message().find("blocks of 4 and 8 tokens"), std::string::npos);
}

// Both pools offload to the tier (by layout: one map each here), and onboard from it;
// cached_blocks is what both hold.
TEST(WorkerSpanTest, OnboardFillsEveryPoolAndCountsWhatAllHold) {
  MapTier tier;
  auto worker = GemmaLikeWorker(16, 16, &tier);
  const std::vector<BlockKey> keys = Keys(0, 3);
  const std::vector<uint32_t> tokens = Tokens(0, 12);
  auto a = worker->Allocate(Spanning(1, keys, tokens));
  ASSERT_TRUE(a.ok());
  for (size_t i = 0; i < 3; ++i) tier.blocks[keys[i]] = std::vector<uint8_t>(512, 7);
  auto onboarded = worker->Onboard(1, 1, keys, {});
  ASSERT_TRUE(onboarded.ok()) << onboarded.status().ToString();
  EXPECT_EQ(onboarded->onboarded_blocks, 6u) << "three blocks in each pool";
  EXPECT_EQ(onboarded->cached_blocks, 3u);
  EXPECT_EQ(worker->Sequence(1, 1, 1).value().filled_blocks, 3u);

  tier.blocks.erase(keys[2]);
  auto b = worker->Allocate(Spanning(2, Keys(10, 3), tokens));
  ASSERT_TRUE(b.ok());
  for (size_t i = 10; i < 13; ++i) tier.blocks[Key(i)] = std::vector<uint8_t>(512, 9);
  auto only_full = worker->Onboard(1, 2, Keys(10, 3), {}, nullptr, 0);
  ASSERT_TRUE(only_full.ok());
  EXPECT_EQ(only_full->onboarded_blocks, 3u);
  EXPECT_EQ(only_full->cached_blocks, 0u) << "the windowed pool holds none yet";
  EXPECT_EQ(worker->Sequence(1, 2, 7).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvtier::worker
