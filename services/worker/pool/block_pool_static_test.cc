// Static (preallocated) and dynamic (growing) sequences: the two cache modes of seed 003,
// on the paged pool. A static sequence's block table is fixed at StartSequence, as a
// CUDA graph captured over it needs.
#include <gtest/gtest.h>

#include "services/worker/pool/block_pool.h"
#include "services/worker/pool/block_pool_testing.h"

namespace kvtier::worker {
namespace {

using testing::kRoot;
using testing::kTpb;
using testing::MakePool;
using testing::Tokens;

BlockKey Key(uint64_t n) { return BlockKey{0x2000 + n, n * 104729}; }

// A static sequence's request; `prompt` and `keys` must outlive it.
SequenceRequest Static(SequenceId id, const std::vector<uint32_t>& prompt, uint32_t reserve,
                       const std::vector<BlockKey>& keys) {
  return {.id = id, .root = kRoot, .block_keys = keys, .tokens = prompt, .reserve_tokens = reserve};
}

const std::vector<BlockKey> kNoKeys;

uint64_t Evictions(const BlockPool& pool) {
  uint64_t total = 0;
  for (uint64_t n : pool.Stats().evictions_by_priority) total += n;
  return total;
}

Status Commit(BlockPool& pool, SequenceId id, const std::vector<BlockKey>& keys) {
  return pool.Commit(id, keys, {}, {});
}

TEST(StaticSequenceTest, ItsTableIsReservedAtOnceAndNeverChangesAsItGrows) {
  auto pool = MakePool(16);
  const std::vector<uint32_t> prompt = Tokens(0, 6);
  const std::vector<BlockKey> keys = {Key(0)};
  auto start = pool->StartSequence(Static(1, prompt, 20, keys));
  ASSERT_TRUE(start.ok()) << start.status();
  ASSERT_EQ(start->block_table.size(), 5u) << "20 tokens of 4 a block";
  EXPECT_EQ(pool->Stats().in_use, 5u);
  // Decode to the reserve, token by token and by a chunk: nothing is allocated.
  for (int i = 0; i < 10; ++i) {
    auto growth = pool->Extend(1, 1);
    ASSERT_TRUE(growth.ok());
    EXPECT_TRUE(growth->new_blocks.empty());
    EXPECT_TRUE(growth->evicted.empty());
  }
  ASSERT_TRUE(pool->Extend(1, 4).ok());  // 20 tokens: full
  EXPECT_EQ(pool->BlockTable(1).value(), start->block_table);
  EXPECT_EQ(pool->Stats().in_use, 5u);
  // Its blocks commit and are reused as any sequence's.
  ASSERT_TRUE(Commit(*pool, 1, {Key(0), Key(1)}).ok());
  EXPECT_EQ(pool->LookupPrefix(kRoot, std::vector<BlockKey>{Key(0), Key(1)}), 2u);
}

TEST(StaticSequenceTest, GrowingPastTheReserveIsRefusedAndChangesNothing) {
  auto pool = MakePool(16);
  const std::vector<uint32_t> prompt = Tokens(0, 3);
  auto start = pool->StartSequence(Static(1, prompt, 8, kNoKeys));
  ASSERT_TRUE(start.ok());
  ASSERT_TRUE(pool->Extend(1, 5).ok());  // 8 tokens
  const Result<SequenceGrowth> past = pool->Extend(1, 1);
  EXPECT_EQ(past.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(past.status().message().find("reserved 8 tokens; 9 would not fit"), std::string::npos)
      << past.status();
  EXPECT_EQ(pool->BlockTable(1).value(), start->block_table);
  // The sequence still holds 8 tokens: committing both blocks works, a third does not.
  EXPECT_TRUE(Commit(*pool, 1, {Key(0), Key(1)}).ok());
  EXPECT_EQ(Commit(*pool, 1, {Key(0), Key(1), Key(2)}).code(), StatusCode::kInvalidArgument);
}

TEST(StaticSequenceTest, AReserveBelowThePromptOrBeyondThePoolIsRefused) {
  auto pool = MakePool(4);
  const std::vector<uint32_t> nine = Tokens(0, 9), one = Tokens(0, 1);
  const std::vector<BlockKey> keys = {Key(0), Key(1)};
  const Result<SequenceStart> small = pool->StartSequence(Static(1, nine, 8, keys));
  EXPECT_EQ(small.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(small.status().message().find("reserve_tokens 8 is less than its 9 prompt tokens"),
            std::string::npos)
      << small.status();
  // 5 blocks of a 4-block pool: refused before anything is taken.
  EXPECT_EQ(pool->StartSequence(Static(2, one, 20, kNoKeys)).status().code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(pool->Stats().free, 4u);
}

TEST(StaticSequenceTest, OthersEvictionsNeverTouchItsReservedBlocks) {
  auto pool = MakePool(6);
  const std::vector<uint32_t> prompt = Tokens(0, 2);
  auto fixed = pool->StartSequence(Static(1, prompt, 16, kNoKeys));  // 4 blocks, 2 tokens in use
  ASSERT_TRUE(fixed.ok());
  // Dynamic sequences churn through the other two blocks, committing and evicting.
  for (SequenceId id = 2; id < 12; ++id) {
    const std::vector<BlockKey> keys = {Key(id * 10), Key(id * 10 + 1)};
    const std::vector<uint32_t> tokens = Tokens(static_cast<uint32_t>(id) * 100, 8);
    ASSERT_TRUE(pool->StartSequence({id, kRoot, 0, 0, keys, tokens}).ok());
    ASSERT_TRUE(Commit(*pool, id, keys).ok());
    ASSERT_TRUE(pool->FreeSequence(id).ok());
  }
  EXPECT_GT(Evictions(*pool), 0u);
  ASSERT_TRUE(pool->Extend(1, 14).ok());
  EXPECT_EQ(pool->BlockTable(1).value(), fixed->block_table);
}

TEST(StaticSequenceTest, InAWindowedPoolItKeepsTheBlocksThatLeftTheWindow) {
  // 8-token window, 4 sink tokens: a dynamic sequence releases blocks 1 and 2 at 20 tokens
  // (block_pool_test.cc); a static one keeps its table whole.
  auto pool = MakePool(8, {.window_tokens = 8, .sink_tokens = 4});
  const std::vector<uint32_t> prompt = Tokens(0, 4);
  const std::vector<BlockKey> keys = {Key(0)};
  auto start = pool->StartSequence(Static(1, prompt, 20, keys));
  ASSERT_TRUE(start.ok());
  auto growth = pool->Extend(1, 16);
  ASSERT_TRUE(growth.ok());
  EXPECT_TRUE(growth->released.empty());
  EXPECT_EQ(pool->BlockTable(1).value(), start->block_table);
}

TEST(DynamicSequenceTest, GrowsBlockByBlockAndKeepsTheBlocksItHad) {
  auto pool = MakePool(16);
  const std::vector<uint32_t> prompt = Tokens(0, 3);
  auto start = pool->StartSequence({1, kRoot, 0, 0, kNoKeys, prompt});
  ASSERT_TRUE(start.ok());
  ASSERT_EQ(start->block_table.size(), 1u);
  std::vector<BlockId> table = start->block_table;
  for (int step = 0; step < 12; ++step) {
    auto growth = pool->Extend(1, 1);
    ASSERT_TRUE(growth.ok());
    table.insert(table.end(), growth->new_blocks.begin(), growth->new_blocks.end());
  }
  EXPECT_EQ(table.size(), 4u) << "15 tokens";
  EXPECT_EQ(pool->BlockTable(1).value(), table) << "blocks are appended, never moved";
}

}  // namespace
}  // namespace kvtier::worker
