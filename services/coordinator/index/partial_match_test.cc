// Partial matching in the coordinator's index: a prompt's tail after its matched prefix
// is compared with the cached children (stored with tokens) of the last matched block.
#include <gtest/gtest.h>

#include <numeric>

#include "services/coordinator/index/block_index.h"

namespace kvtier::coordinator {
namespace {

constexpr uint32_t kTpb = 4;
constexpr Location kNode1Gpu{1, Tier::kGpu, 0};
constexpr Location kNode2Host{2, Tier::kHost, 0};

// Two full blocks of a conversation: tokens 10-13 and 20-23.
const std::vector<uint32_t> kConversation = {10, 11, 12, 13, 20, 21, 22, 23};

class PartialMatchTest : public ::testing::Test {
 protected:
  // Stores the full blocks of `tokens` (with their tokens) at `where`, under `scope`.
  Status StoreTokens(std::span<const uint32_t> tokens, Location where, ScopeId scope = 0) {
    const std::vector<BlockKey> keys = KeysOf(tokens, scope);
    const std::optional<BlockKey> parent = std::nullopt;
    return index_->Store({.scope = scope,
                          .parent = parent,
                          .keys = keys,
                          .location = where,
                          .retention = {},
                          .tokens = tokens.first(keys.size() * kTpb)});
  }
  static std::vector<BlockKey> KeysOf(std::span<const uint32_t> tokens, ScopeId scope = 0) {
    return ComputeBlockKeys("salt-" + std::to_string(scope), tokens, kTpb);
  }
  // Looks the prompt up as an engine would: keys of its full blocks, the rest as the tail.
  LookupResult LookupPrompt(const std::vector<uint32_t>& prompt, ScopeId scope = 0) {
    const std::vector<BlockKey> keys = KeysOf(prompt, scope);
    return index_->Lookup(scope, keys, std::span(prompt).subspan(keys.size() * kTpb));
  }

  std::unique_ptr<BlockIndex> index_ = *BlockIndex::Create({});
};

// `r` scores one node only: `node`, with this prefix, partial tokens and score.
void ExpectOneScore(const LookupResult& r, NodeId node, uint32_t prefix_blocks,
                    uint32_t partial_tokens, double score) {
  ASSERT_EQ(r.scores.size(), 1u);
  EXPECT_EQ(r.scores[0].node, node);
  EXPECT_EQ(r.scores[0].prefix_blocks, prefix_blocks);
  EXPECT_EQ(r.scores[0].partial_tokens, partial_tokens);
  EXPECT_DOUBLE_EQ(r.scores[0].score, score);
}

TEST_F(PartialMatchTest, PromptEndingInsideACachedBlockMatchesItsLeadingTokens) {
  ASSERT_TRUE(StoreTokens(kConversation, kNode1Gpu).ok());
  // Block 0 whole, then 3 tokens of block 1 (20, 21, 22).
  const LookupResult r = LookupPrompt({10, 11, 12, 13, 20, 21, 22});
  EXPECT_EQ(r.matched_blocks, 1u);
  EXPECT_EQ(r.partial.tokens, 3u);
  EXPECT_EQ(r.partial.block_tokens, kTpb);
  EXPECT_EQ(r.partial.key, KeysOf(kConversation)[1]);
  EXPECT_EQ(r.partial.locations, std::vector<Location>{kNode1Gpu});
  ExpectOneScore(r, 1, 1, 3, 1.0 + 0.75);  // block 0 plus 3/4 of block 1, on a GPU
}

TEST_F(PartialMatchTest, ADivergingFullBlockIsNotPartialButATailThatDivergesIs) {
  ASSERT_TRUE(StoreTokens(kConversation, kNode1Gpu).ok());
  // Block 1 differs at its third token: as a full block its key misses, so a caller
  // passing it as keys gets no partial match (the tail is what follows the keys)...
  const LookupResult full = LookupPrompt({10, 11, 12, 13, 20, 21, 99, 99});
  EXPECT_EQ(full.matched_blocks, 1u);
  EXPECT_EQ(full.partial.tokens, 0u);
  // ...while the same tokens passed as the tail after block 0 share two.
  const std::vector<BlockKey> first = KeysOf(kConversation);
  const std::vector<uint32_t> tail = {20, 21, 99, 99};
  const LookupResult partial = index_->Lookup(0, std::span(first).first(1), tail);
  EXPECT_EQ(partial.partial.tokens, 2u);
  EXPECT_EQ(partial.scores[0].partial_tokens, 2u);
}

TEST_F(PartialMatchTest, TheSiblingSharingTheMostTokensWins) {
  // Block 0, then two cached continuations: 20 21 22 23 and 20 21 30 31.
  ASSERT_TRUE(StoreTokens(kConversation, kNode1Gpu).ok());
  ASSERT_TRUE(StoreTokens(std::vector<uint32_t>{10, 11, 12, 13, 20, 21, 30, 31}, kNode2Host).ok());
  const LookupResult r = LookupPrompt({10, 11, 12, 13, 20, 21, 30});
  EXPECT_EQ(r.partial.tokens, 3u);
  EXPECT_EQ(r.partial.key, KeysOf(std::vector<uint32_t>{10, 11, 12, 13, 20, 21, 30, 31})[1]);
  EXPECT_EQ(r.partial.locations, std::vector<Location>{kNode2Host});
  // Node 2 (host, weight 0.5): 0.5 + 0.5 * 3/4; node 1 (GPU): 1 + 2/4 from its sibling.
  ASSERT_EQ(r.scores.size(), 2u);
  EXPECT_EQ(r.scores[0].node, 1u);
  EXPECT_EQ(r.scores[0].partial_tokens, 2u);
  EXPECT_DOUBLE_EQ(r.scores[0].score, 1.5);
  EXPECT_EQ(r.scores[1].node, 2u);
  EXPECT_EQ(r.scores[1].partial_tokens, 3u);
  EXPECT_DOUBLE_EQ(r.scores[1].score, 0.875);
}

TEST_F(PartialMatchTest, ANodeWithoutThePrefixGetsNoShareOfTheNextBlock) {
  // Node 1 holds block 0; node 2 holds only block 1 (its block 0 went elsewhere).
  const std::vector<BlockKey> keys = KeysOf(kConversation);
  ASSERT_TRUE(index_
                  ->Store({.scope = 0,
                           .parent = std::nullopt,
                           .keys = std::span(keys).first(1),
                           .location = kNode1Gpu,
                           .retention = {},
                           .tokens = std::span(kConversation).first(4)})
                  .ok());
  ASSERT_TRUE(index_
                  ->Store({.scope = 0,
                           .parent = keys[0],
                           .keys = std::span(keys).subspan(1),
                           .location = kNode2Host,
                           .retention = {},
                           .tokens = std::span(kConversation).subspan(4)})
                  .ok());
  const LookupResult r = LookupPrompt({10, 11, 12, 13, 20, 21});
  EXPECT_EQ(r.partial.tokens, 2u);
  ExpectOneScore(r, 1, 1, 0, 1.0);  // node 2 holds 2 tokens of block 1 but not block 0
}

TEST_F(PartialMatchTest, APromptShorterThanOneBlockMatchesAChainsFirstBlock) {
  ASSERT_TRUE(StoreTokens(kConversation, kNode1Gpu).ok());
  const LookupResult r = LookupPrompt({10, 11});
  EXPECT_EQ(r.matched_blocks, 0u);
  EXPECT_EQ(r.partial.tokens, 2u);
  ExpectOneScore(r, 1, 0, 2, 0.5);
}

TEST_F(PartialMatchTest, AnotherSaltNeverMatchesTokensPartially) {
  ASSERT_TRUE(StoreTokens(kConversation, kNode1Gpu, /*scope=*/1).ok());
  // Same tokens under scope 2: its chain has other keys and its root other children.
  const LookupResult first_block = LookupPrompt({10, 11}, /*scope=*/2);
  EXPECT_EQ(first_block.partial.tokens, 0u);
  EXPECT_TRUE(first_block.scores.empty());
  // Even given scope 1's own first key, a scope-2 lookup matches nothing after it.
  const std::vector<BlockKey> scope1 = KeysOf(kConversation, 1);
  const std::vector<uint32_t> tail = {20, 21};
  const LookupResult next = index_->Lookup(2, std::span(scope1).first(1), tail);
  EXPECT_EQ(next.matched_blocks, 0u);
  EXPECT_EQ(next.partial.tokens, 0u);
  EXPECT_TRUE(next.scores.empty());
}

TEST_F(PartialMatchTest, BlocksStoredWithoutTokensAreNoCandidates) {
  const std::vector<BlockKey> keys = KeysOf(kConversation);
  ASSERT_TRUE(index_->Store({0, std::nullopt, keys, kNode1Gpu, {}}).ok());
  EXPECT_EQ(LookupPrompt({10, 11, 12, 13, 20, 21}).partial.tokens, 0u);
  // Stored again by a node that sends tokens: they are kept from then on.
  ASSERT_TRUE(StoreTokens(kConversation, kNode2Host).ok());
  EXPECT_EQ(LookupPrompt({10, 11, 12, 13, 20, 21}).partial.tokens, 2u);
}

TEST_F(PartialMatchTest, TokensLeaveWithTheirBlock) {
  // A twin index holds the same blocks without tokens: what the tokens cost is the difference.
  std::unique_ptr<BlockIndex> twin = *BlockIndex::Create({});
  const std::vector<BlockKey> keys = KeysOf(kConversation);
  ASSERT_TRUE(twin->Store({0, std::nullopt, keys, kNode1Gpu, {}}).ok());
  ASSERT_TRUE(StoreTokens(kConversation, kNode1Gpu).ok());
  EXPECT_GE(index_->Stats().memory_bytes,
            twin->Stats().memory_bytes + kConversation.size() * sizeof(uint32_t));
  // Block 1 removed: nothing partial after block 0 any more.
  EXPECT_EQ(index_->Remove(kNode1Gpu, std::span(keys).subspan(1)), 1u);
  EXPECT_EQ(LookupPrompt({10, 11, 12, 13, 20, 21}).partial.tokens, 0u);
  // A new block reusing the freed spot has no stale tokens: stored without any, it matches nothing.
  const std::vector<BlockKey> other = KeysOf(std::vector<uint32_t>{10, 11, 12, 13, 20, 21, 22, 24});
  ASSERT_TRUE(index_->Store({0, other[0], std::span(other).subspan(1), kNode1Gpu, {}}).ok());
  EXPECT_EQ(LookupPrompt({10, 11, 12, 13, 20, 21}).partial.tokens, 0u);
  // Everything gone: no memory left behind for tokens.
  EXPECT_EQ(index_->RemoveNode(1), 2u);
  EXPECT_EQ(twin->RemoveNode(1), 2u);
  EXPECT_EQ(index_->Stats().memory_bytes, twin->Stats().memory_bytes);
}

TEST_F(PartialMatchTest, TokensThatDoNotSplitEvenlyAreRefusedAndNothingIsStored) {
  const std::vector<BlockKey> keys = KeysOf(kConversation);
  const Status s = index_->Store({.scope = 0,
                                  .parent = std::nullopt,
                                  .keys = keys,
                                  .location = kNode1Gpu,
                                  .retention = {},
                                  .tokens = std::span(kConversation).first(7)});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("7 tokens for 2 blocks"), std::string::npos) << s.message();
  EXPECT_EQ(index_->Stats().blocks, 0u);
}

}  // namespace
}  // namespace kvtier::coordinator
