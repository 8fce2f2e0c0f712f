// Windowed pools in the coordinator's index: interior blocks that left every window are
// evicted, sinks stay, and lookups serve a windowed prefix through the blocks between.
#include <gtest/gtest.h>

#include "services/coordinator/index/block_index.h"

namespace kvtier::coordinator {
namespace {

constexpr Location kFull{0, Tier::kGpu, 0};      // node 0, GPU pool 0: full attention
constexpr Location kWindowed{0, Tier::kGpu, 1};  // node 0, GPU pool 1: windowed

std::vector<BlockKey> Chain(uint64_t first, size_t n) {
  const OpaqueKeyNamespace ns("windowed", "");
  std::vector<BlockKey> keys;
  for (size_t i = 0; i < n; ++i) keys.push_back(ns.Key(first + i));
  return keys;
}

std::vector<BlockKey> Pick(const std::vector<BlockKey>& keys, std::initializer_list<size_t> which) {
  std::vector<BlockKey> out;
  for (size_t i : which) out.push_back(keys[i]);
  return out;
}

class WindowedPoolTest : public ::testing::Test {
 protected:
  void Declare(PoolWindow window) {
    ASSERT_TRUE(index_->SetNodeWindows(0, std::vector<PoolWindowSpec>{{kWindowed, window}}).ok());
  }
  Status Store(const std::vector<BlockKey>& keys, Location where,
               std::optional<BlockKey> parent = std::nullopt, uint8_t priority = kDefaultPriority) {
    const std::vector<BlockRetention> retention(keys.size(), BlockRetention{priority, {}});
    return index_->Store({0, parent, keys, where, retention});
  }
  // Blocks 0-7 in one place, blocks 1-4 at priority 20: those go first wherever they may.
  void StoreEightWithCheapMiddle(Location where) {
    const auto keys = Chain(1, 8);
    ASSERT_TRUE(Store({keys[0]}, where).ok());
    ASSERT_TRUE(Store(Pick(keys, {1, 2, 3, 4}), where, keys[0], 20).ok());
    ASSERT_TRUE(Store(Pick(keys, {5, 6, 7}), where, keys[4]).ok());
  }

  std::unique_ptr<BlockIndex> index_ = *BlockIndex::Create({});
};

TEST_F(WindowedPoolTest, InteriorBlocksPastEveryWindowGoBeforeTheLeaf) {
  Declare({.window_blocks = 3, .sink_blocks = 1});
  StoreEightWithCheapMiddle(kWindowed);
  // The leaf 7's window is blocks 5-7 and block 0 is a sink: blocks 1-4 left every
  // window, so priority 20 goes first although they are interior, in the order they left
  // it (root first); then 7, and each block above it becomes a leaf in turn.
  EXPECT_EQ(index_->Evict(0, Tier::kGpu, 8), Pick(Chain(1, 8), {1, 2, 3, 4, 7, 6, 5, 0}));
  EXPECT_EQ(index_->Stats().blocks, 0u);
}

TEST_F(WindowedPoolTest, FullAttentionPoolKeepsLeavesFirst) {
  Declare({.window_blocks = 3, .sink_blocks = 1});
  StoreEightWithCheapMiddle(kFull);  // same blocks in the node's full-attention pool
  EXPECT_EQ(index_->Evict(0, Tier::kGpu, 8), Pick(Chain(1, 8), {7, 6, 5, 4, 3, 2, 1, 0}));
}

TEST_F(WindowedPoolTest, LookupServesTheSinksAndTheLastWindow) {
  Declare({.window_blocks = 3, .sink_blocks = 1});
  StoreEightWithCheapMiddle(kWindowed);
  ASSERT_EQ(index_->Evict(0, Tier::kGpu, 4).size(), 4u);  // blocks 1-4 gone: ghosts now
  const auto keys = Chain(1, 8);
  LookupResult result = index_->Lookup(0, keys);
  EXPECT_EQ(result.matched_blocks, 8u) << "sink 0 and window 5-7 are held";
  EXPECT_TRUE(result.LocationsOf(2).empty());
  ASSERT_EQ(result.scores.size(), 1u);
  EXPECT_EQ(result.scores[0].prefix_blocks, 8u);
  EXPECT_DOUBLE_EQ(result.scores[0].score, 8.0);
  // A prompt ending at block 6 needs blocks 4-6: block 4 is gone, and so is that prefix.
  result = index_->Lookup(0, std::vector<BlockKey>(keys.begin(), keys.begin() + 7));
  EXPECT_EQ(result.matched_blocks, 1u) << "only the sink, as a prefix of its own";
}

TEST_F(WindowedPoolTest, SinksStayWhileBlocksBelowThemAreHeld) {
  Declare({.window_blocks = 2, .sink_blocks = 2});
  const auto keys = Chain(1, 6);
  ASSERT_TRUE(
      Store(Pick(keys, {0, 1, 2, 3}), kWindowed).ok());  // least recent: 2, 3, then sinks 0, 1
  ASSERT_TRUE(Store(Pick(keys, {4, 5}), kWindowed, keys[3]).ok());  // then 4, 5
  // 2 and 3 left leaf 5's window (4-5); sinks 0 and 1 wait until nothing below is held.
  EXPECT_EQ(index_->Evict(0, Tier::kGpu, 6), Pick(keys, {2, 3, 5, 4, 1, 0}));
}

TEST_F(WindowedPoolTest, AShortBranchKeepsTheSharedBlocksInItsWindow) {
  Declare({.window_blocks = 2, .sink_blocks = 0});
  const auto trunk = Chain(1, 6);   // blocks 0-5; 0-3 at priority 20
  const auto twig = Chain(100, 1);  // a second child of block 2
  ASSERT_TRUE(Store(Pick(trunk, {0, 1, 2, 3}), kWindowed, std::nullopt, 20).ok());
  ASSERT_TRUE(Store(Pick(trunk, {4, 5}), kWindowed, trunk[3]).ok());
  ASSERT_TRUE(Store(twig, kWindowed, trunk[2]).ok());
  // Past the trunk leaf's window (4-5): 0-3. But block 2 is in the twig's window, so
  // of priority 20 only 0, 1 and 3 go.
  EXPECT_EQ(index_->Evict(0, Tier::kGpu, 3), Pick(trunk, {0, 1, 3}));
  EXPECT_EQ(index_->Lookup(0, std::vector<BlockKey>{trunk[0], trunk[1], trunk[2], twig[0]})
                .matched_blocks,
            4u)
      << "the twig's window (block 2 and the twig) is whole";
  EXPECT_EQ(index_->Lookup(0, trunk).matched_blocks, 6u) << "so is the trunk's (4-5)";
}

TEST_F(WindowedPoolTest, ATouchRenewsOnlyTheWindowAndTheSinks) {
  Declare({.window_blocks = 2, .sink_blocks = 1});
  const auto keys = Chain(1, 6);
  ASSERT_TRUE(Store(keys, kWindowed).ok());  // recency: 1, 2, 3, 4, 5, then sink 0
  index_->Touch(0, 0, keys);                 // a request over all 6 uses 4, 5 and 0
  // Blocks 1-3 were not used: they stay least recent and go first (past every window).
  EXPECT_EQ(index_->Evict(0, Tier::kGpu, 3), Pick(keys, {1, 2, 3}));
  EXPECT_EQ(index_->Lookup(0, keys).matched_blocks, 6u);
}

TEST_F(WindowedPoolTest, TwoPoolsOfANodeAreTwoPlaces) {
  Declare({.window_blocks = 2});
  const auto keys = Chain(1, 3);
  ASSERT_TRUE(Store(keys, kFull).ok());
  ASSERT_TRUE(Store(keys, kWindowed).ok());
  EXPECT_EQ(index_->Held(0, Tier::kGpu), 6u);
  EXPECT_EQ(index_->Remove(kWindowed, keys), 3u);
  EXPECT_EQ(index_->Held(0, Tier::kGpu), 3u) << "the full-attention pool keeps its copies";
  EXPECT_EQ(index_->Lookup(0, keys).matched_blocks, 3u);
}

TEST_F(WindowedPoolTest, RemovingTheNodeLeavesNothing) {
  Declare({.window_blocks = 3, .sink_blocks = 1});
  StoreEightWithCheapMiddle(kWindowed);
  ASSERT_EQ(index_->Evict(0, Tier::kGpu, 2).size(), 2u);  // two interior blocks: absent slots below
  EXPECT_EQ(index_->RemoveNode(0), 6u);
  EXPECT_EQ(index_->Stats().blocks, 0u);
  EXPECT_EQ(index_->Stats().locations, 0u);
  EXPECT_EQ(index_->Lookup(0, Chain(1, 8)).matched_blocks, 0u);
}

TEST_F(WindowedPoolTest, BadDeclarationsAreRefusedAndChangeNothing) {
  auto declare = [&](NodeId node, PoolWindowSpec spec) {
    return index_->SetNodeWindows(node, std::vector<PoolWindowSpec>{spec}).code();
  };
  EXPECT_EQ(declare(0, {kWindowed, {.window_blocks = 2, .sink_blocks = 3}}),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(declare(0, {kWindowed, {.window_blocks = 0, .sink_blocks = 1}}),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(declare(1, {kWindowed, {.window_blocks = 2}}), StatusCode::kInvalidArgument)
      << "pool of node 0";
  EXPECT_EQ(declare(kMaxNodes, {{kMaxNodes, Tier::kGpu, 1}, {.window_blocks = 2}}),
            StatusCode::kInvalidArgument);
  const std::vector<PoolWindowSpec> twice = {{kWindowed, {.window_blocks = 2}},
                                             {kWindowed, {.window_blocks = 4}}};
  EXPECT_EQ(index_->SetNodeWindows(0, twice).code(), StatusCode::kInvalidArgument);
  // Nothing was declared: pool 1 is full attention, leaves first.
  StoreEightWithCheapMiddle(kWindowed);
  EXPECT_EQ(index_->Evict(0, Tier::kGpu, 1), Pick(Chain(1, 8), {7}));
  // A change under held blocks is refused; the same declaration again is fine.
  EXPECT_EQ(declare(0, {kWindowed, {.window_blocks = 2}}), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(index_->SetNodeWindows(0, {}).ok());
}

// A slot keeps its counts in 16 bits and the larger ones aside: a root block with 70,000
// children in one pool takes both past 65,535 and back.
TEST_F(WindowedPoolTest, CountsPastSixteenBitsStayExact) {
  Declare({.window_blocks = 2, .sink_blocks = 0});
  constexpr size_t kChildren = 70'000;
  const auto root = Chain(1, 1), deep = Chain(2, 3), children = Chain(100, kChildren);
  const auto remove_all_but_the_last = [&](Location where) {
    for (size_t i = 0; i + 1 < kChildren; ++i)
      ASSERT_EQ(index_->Remove(where, {&children[i], 1}), 1u);
  };

  // Windowed pool (W = 2): root, then root -> d0 -> d1 -> d2, then 70,000 leaf children
  // of the root. The root counts 70,001 children there and 70,000 leaves in its window
  // (d2 is three blocks below: outside).
  ASSERT_TRUE(Store(root, kWindowed).ok());
  ASSERT_TRUE(Store(deep, kWindowed, root[0]).ok());
  for (const BlockKey& child : children) ASSERT_TRUE(Store({child}, kWindowed, root[0]).ok());
  remove_all_but_the_last(kWindowed);
  // One leaf left in the root's window: the root (the oldest) stays; d0, the next oldest,
  // interior and past every window, goes.
  EXPECT_EQ(index_->Evict(0, Tier::kGpu, 1), std::vector<BlockKey>{deep[0]});
  // The last one goes: the root is interior (d0's slot below it) and past every window.
  ASSERT_EQ(index_->Remove(kWindowed, {&children.back(), 1}), 1u);
  EXPECT_EQ(index_->Evict(0, Tier::kGpu, 1), root);

  // Full attention, on node 1: the root with 70,000 children stays interior until the
  // last child goes.
  const Location full_on_node1{1, Tier::kGpu, 0};
  ASSERT_TRUE(Store(root, full_on_node1).ok());
  for (const BlockKey& child : children) ASSERT_TRUE(Store({child}, full_on_node1, root[0]).ok());
  remove_all_but_the_last(full_on_node1);
  EXPECT_EQ(index_->Evict(1, Tier::kGpu, 1), std::vector<BlockKey>{children.back()});
  EXPECT_EQ(index_->Evict(1, Tier::kGpu, 1), root) << "a leaf now";
}

// A node whose windowed pools are a model's layer groups (a pool per window, every
// sequence spanning them): it serves a prefix only where each pool does.
TEST_F(WindowedPoolTest, ANodeServesWhatEveryOneOfItsWindowedPoolsServes) {
  constexpr Location kWide{0, Tier::kGpu, 2};
  ASSERT_TRUE(index_
                  ->SetNodeWindows(0, std::vector<PoolWindowSpec>{{kWindowed, {.window_blocks = 2}},
                                                                  {kWide, {.window_blocks = 4}}})
                  .ok());
  const auto keys = Chain(1, 5);
  ASSERT_TRUE(Store(keys, kWindowed).ok());
  LookupResult one = index_->Lookup(0, keys);
  EXPECT_EQ(one.matched_blocks, 5u) << "the blocks are cached";
  EXPECT_TRUE(one.scores.empty()) << "but the node cannot run the prompt: the wide pool lacks it";
  ASSERT_TRUE(Store(Pick(keys, {0, 1, 2}), kWide).ok());
  LookupResult partly = index_->Lookup(0, keys);
  ASSERT_EQ(partly.scores.size(), 1u);
  EXPECT_EQ(partly.scores[0].prefix_blocks, 3u) << "what both serve";
  ASSERT_TRUE(Store(Pick(keys, {3, 4}), kWide, keys[2]).ok());
  EXPECT_EQ(index_->Lookup(0, keys).scores.at(0).prefix_blocks, 5u);
}

}  // namespace
}  // namespace kvtier::coordinator
