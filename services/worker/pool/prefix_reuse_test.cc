// Prefix reuse in a windowed pool (its sinks and last window serve a prefix), a reuse the
// caller chooses (a sequence spanning pools), and the checks that change nothing.
#include <gtest/gtest.h>

#include <vector>

#include "common/block_key.h"
#include "services/worker/pool/block_pool.h"
#include "services/worker/pool/block_pool_testing.h"

namespace kvtier::worker {
namespace {

using testing::kRoot;
using testing::kTpb;
using testing::MakePool;
using testing::Tokens;

// The chained keys of `tokens`' full blocks, as an engine computes them.
std::vector<BlockKey> Keys(const std::vector<uint32_t>& tokens) {
  std::vector<BlockKey> keys;
  BlockKey parent = kRoot;
  for (size_t b = 0; (b + 1) * kTpb <= tokens.size(); ++b) {
    parent = ChainBlockKey(parent, std::span(tokens).subspan(b * kTpb, kTpb), {});
    keys.push_back(parent);
  }
  return keys;
}

// An 8-token window (2 blocks) with 4 sink tokens (1 block): a prefix of m blocks needs
// block 0 and blocks m-2, m-1.
std::unique_ptr<BlockPool> WindowedPool(uint32_t blocks) {
  return MakePool(blocks, {.window_tokens = 8, .sink_tokens = 4});
}

// Caches a 6-block prompt, then takes 5 blocks of an 8-block pool: the three interior
// blocks between the sink and the last window go first.
TEST(PrefixReuseTest, AWindowedPoolServesAPrefixByItsSinksAndItsLastWindow) {
  auto pool = WindowedPool(8);
  const std::vector<uint32_t> prompt = Tokens(100, 24);
  const std::vector<BlockKey> keys = Keys(prompt);
  ASSERT_TRUE(pool->StartSequence({1, kRoot, 0, 0, keys, prompt}).ok());
  ASSERT_TRUE(pool->Commit(1, keys, prompt, {}).ok());
  ASSERT_TRUE(pool->FreeSequence(1).ok());
  std::vector<BlockId> blank;
  std::vector<EvictedBlock> evicted;
  ASSERT_TRUE(pool->AllocateBlocks(5, &blank, &evicted).ok());
  ASSERT_EQ(evicted.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(evicted[i].key, keys[1 + i]) << "victim " << i;

  EXPECT_EQ(pool->ServablePrefixes(kRoot, keys),
            (std::vector<bool>{true, true, false, false, false, false, true}));
  EXPECT_EQ(pool->LookupPrefix(kRoot, keys), 6u);
  ASSERT_TRUE(pool->FreeBlocks(blank).ok());

  // A longer prompt over the same six blocks reuses them; its table skips the gap.
  std::vector<uint32_t> longer = prompt;
  for (uint32_t t = 0; t < 6; ++t) longer.push_back(900 + t);
  auto start = pool->StartSequence({2, kRoot, 0, 0, Keys(longer), longer});
  ASSERT_TRUE(start.ok()) << start.status().ToString();
  EXPECT_EQ(start->reused_blocks, 6u);
  ASSERT_EQ(start->block_table.size(), 8u);
  EXPECT_NE(start->block_table[0], kNoBlock);
  for (size_t i = 1; i < 4; ++i) EXPECT_EQ(start->block_table[i], kNoBlock) << "block " << i;
  for (size_t i = 4; i < 8; ++i) EXPECT_NE(start->block_table[i], kNoBlock) << "block " << i;
  EXPECT_TRUE(pool->Commit(2, Keys(longer), longer, {}).ok()) << "the gap commits nothing";
}

TEST(PrefixReuseTest, AFullAttentionPoolServesOnlyTheWholeChain) {
  auto pool = MakePool(8);
  const std::vector<uint32_t> prompt = Tokens(0, 12);
  const std::vector<BlockKey> keys = Keys(prompt);
  ASSERT_TRUE(pool->StartSequence({1, kRoot, 0, 0, keys, prompt}).ok());
  ASSERT_TRUE(pool->Commit(1, std::span(keys).first(2), std::span(prompt).first(8), {}).ok());
  EXPECT_EQ(pool->ServablePrefixes(kRoot, keys), (std::vector<bool>{true, true, true, false}));
  EXPECT_EQ(pool->ServablePrefixes(BlockKey{9, 9}, keys),
            (std::vector<bool>{true, false, false, false}))
      << "another salt's root matches nothing";
}

TEST(PrefixReuseTest, AChosenReuseIsTakenAndAnUnservedOneRefused) {
  auto pool = MakePool(8);
  const std::vector<uint32_t> prompt = Tokens(0, 14);
  const std::vector<BlockKey> keys = Keys(prompt);
  ASSERT_TRUE(pool->StartSequence({1, kRoot, 0, 0, keys, prompt}).ok());
  ASSERT_TRUE(pool->Commit(1, keys, prompt, {}).ok());
  ASSERT_TRUE(pool->FreeSequence(1).ok());

  EXPECT_EQ(pool->PartialReuseTokens(kRoot, keys, 2, prompt, 0), kTpb)
      << "block 2 is cached whole: all of its tokens match";
  // Two of the three cached blocks, and 2 of the third's 4 tokens (taken in place).
  auto start = pool->StartSequence({.id = 2,
                                    .root = kRoot,
                                    .block_keys = keys,
                                    .tokens = prompt,
                                    .reuse_blocks = 2,
                                    .max_partial_tokens = 2});
  ASSERT_TRUE(start.ok()) << start.status().ToString();
  EXPECT_EQ(start->reused_blocks, 2u);
  EXPECT_EQ(start->reused_tokens, 2 * kTpb + 2);

  const std::vector<uint32_t> other = Tokens(500, 8);
  const std::vector<BlockKey> other_keys = Keys(other);
  const SequenceRequest unserved{
      .id = 3, .root = kRoot, .block_keys = other_keys, .tokens = other, .reuse_blocks = 1};
  EXPECT_EQ(pool->CanStart(unserved).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pool->StartSequence(unserved).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(pool->BlockTable(3).ok()) << "a refused start leaves nothing";
}

TEST(PrefixReuseTest, CanStartAndCanExtendAnswerAsTheCallsWouldAndChangeNothing) {
  auto pool = MakePool(4);
  const std::vector<uint32_t> prompt = Tokens(0, 12);
  const std::vector<BlockKey> keys = Keys(prompt);
  const SequenceRequest request{.id = 1, .root = kRoot, .block_keys = keys, .tokens = prompt};
  ASSERT_TRUE(pool->CanStart(request).ok());
  const BlockPoolStats before = pool->Stats();
  EXPECT_EQ(before.free, 4u) << "CanStart took nothing";
  ASSERT_TRUE(pool->StartSequence(request).ok());
  EXPECT_EQ(pool->CanStart(request).code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE(pool->CanExtend(1, 4).ok());
  EXPECT_EQ(pool->CanExtend(1, 5).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(pool->Extend(1, 5).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(pool->CanExtend(7, 1).code(), StatusCode::kNotFound);
  EXPECT_EQ(pool->Stats().free, 1u) << "the refused Extend took nothing";
}

}  // namespace
}  // namespace kvtier::worker

namespace kvtier::worker {
namespace {
// A conversation prefilled by chunks of the window (2 blocks), committed as it goes: the
// next turn over it finds its sink and last window, though the pool is small.
TEST(PrefixReuseTest, AChunkedPrefillLeavesTheLastWindowServable) {
  auto pool = WindowedPool(6);
  const std::vector<uint32_t> prompt = Tokens(0, 24);
  const std::vector<BlockKey> keys = Keys(prompt);
  ASSERT_TRUE(
      pool->StartSequence({1, kRoot, 0, 0, std::span(keys).first(2), std::span(prompt).first(8)})
          .ok());
  std::vector<size_t> released;
  for (uint32_t blocks = 2;; blocks += 2) {
    ASSERT_TRUE(
        pool->Commit(1, std::span(keys).first(blocks), std::span(prompt).first(blocks * kTpb), {})
            .ok());
    if (blocks == 6) break;
    auto grown = pool->Extend(1, 2 * kTpb);
    ASSERT_TRUE(grown.ok()) << grown.status().ToString();
    released.push_back(grown->released.size());
  }
  // A chunk keeps what its first token attends: at 8, tokens 1-8 (blocks 0-2); at 16,
  // tokens 9-16 (blocks 2-4, and the sink).
  EXPECT_EQ(released, (std::vector<size_t>{0, 1}));
  ASSERT_TRUE(pool->FreeSequence(1).ok());
  EXPECT_EQ(pool->LookupPrefix(kRoot, keys), 6u);
}
}  // namespace
}  // namespace kvtier::worker
