// The rules of the coordinator's prefix index, one by one, on the CPU with a fake clock.
#include "services/coordinator/index/block_index.h"

#include <gtest/gtest.h>

namespace kvtier::coordinator {
namespace {

using std::chrono::seconds;

constexpr Location kGpu0{0, Tier::kGpu, 0};
constexpr Location kHost1{1, Tier::kHost, 0};
constexpr Location kGpu1{1, Tier::kGpu, 0};
constexpr Location kDisk2{2, Tier::kDisk, 0};

// Keys of a chain of `n` blocks whose first is `first` (opaque ids keep tests readable).
std::vector<BlockKey> Chain(uint64_t first, size_t n) {
  const OpaqueKeyNamespace ns("test", "");
  std::vector<BlockKey> keys;
  for (size_t i = 0; i < n; ++i) keys.push_back(ns.Key(first + i));
  return keys;
}

class BlockIndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BlockIndexOptions options;
    options.clock = &clock_;
    index_ = *BlockIndex::Create(options);
  }

  Status Store(const std::vector<BlockKey>& keys, Location where, ScopeId scope = 0,
               std::optional<BlockKey> parent = std::nullopt,
               std::vector<BlockRetention> retention = {}) {
    return index_->Store({scope, parent, keys, where, retention});
  }

  FakeClock clock_{seconds(1000)};
  std::unique_ptr<BlockIndex> index_;
};

TEST_F(BlockIndexTest, LookupFindsLongestCachedPrefix) {
  const auto abc = Chain(1, 3);
  ASSERT_TRUE(Store(abc, kGpu0).ok());
  const std::vector<BlockKey> prompt = {abc[0], abc[1],
                                        Chain(99, 1)[0]};  // blocks 0,1 cached, block 2 new
  const LookupResult result = index_->Lookup(0, prompt);
  EXPECT_EQ(result.matched_blocks, 2u);
  ASSERT_EQ(result.LocationsOf(1).size(), 1u);
  EXPECT_EQ(result.LocationsOf(1)[0], kGpu0);
  ASSERT_EQ(result.scores.size(), 1u);
  EXPECT_EQ(result.scores[0].prefix_blocks, 2u);
  EXPECT_DOUBLE_EQ(result.scores[0].score, 2.0);
}

TEST_F(BlockIndexTest, MatchesOnlyAsAChainFromTheRoot) {
  const auto abc = Chain(1, 3);
  ASSERT_TRUE(Store(abc, kGpu0).ok());
  EXPECT_EQ(index_->Lookup(0, std::vector<BlockKey>{abc[1], abc[2]}).matched_blocks, 0u)
      << "block 1 is cached only after block 0";
}

TEST_F(BlockIndexTest, ScoresWeighConsecutivePrefixByBestTier) {
  const auto abc = Chain(1, 3);
  ASSERT_TRUE(Store(abc, kGpu0).ok());                   // node 0: blocks 0-2 on GPU
  ASSERT_TRUE(Store({abc[0], abc[1]}, kHost1).ok());     // node 1: blocks 0,1 on host
  ASSERT_TRUE(Store({abc[0]}, kGpu1).ok());              //         and block 0 on GPU too
  ASSERT_TRUE(Store({abc[1]}, kDisk2, 0, abc[0]).ok());  // node 2: block 1 only
  const LookupResult result = index_->Lookup(0, abc);
  EXPECT_EQ(result.matched_blocks, 3u);
  ASSERT_EQ(result.scores.size(), 2u) << "node 2 lacks block 0, so it can serve no prefix";
  EXPECT_EQ(result.scores[0].node, 0);
  EXPECT_DOUBLE_EQ(result.scores[0].score, 3.0);
  EXPECT_EQ(result.scores[1].node, 1);
  EXPECT_EQ(result.scores[1].prefix_blocks, 2u);
  EXPECT_DOUBLE_EQ(result.scores[1].score, 1.5)
      << "block 0 counts once, at its best tier (gpu 1.0), block 1 host 0.5";
  EXPECT_EQ(result.LocationsOf(1).size(), 3u);
}

// A few nodes (sorted in place) and more than a handful (the other path), ties included.
TEST_F(BlockIndexTest, ScoresComeBestFirstForFewAndManyNodes) {
  const auto abcd = Chain(1, 4);
  for (NodeId node = 0; node < 20; ++node) {
    const size_t held = 1 + (node * 7) % 4;  // node n holds blocks 0 .. held-1 on its GPU
    ASSERT_TRUE(
        Store({abcd.begin(), abcd.begin() + static_cast<long>(held)}, {node, Tier::kGpu, 0}).ok());
    if (node != 4 && node != 19) continue;
    const LookupResult result = index_->Lookup(0, abcd);
    ASSERT_EQ(result.scores.size(), node + 1u) << "every node holds block 0";
    for (size_t i = 0; i < result.scores.size(); ++i) {
      const NodeScore& score = result.scores[i];
      EXPECT_EQ(score.prefix_blocks, 1 + (score.node * 7) % 4) << "node " << score.node;
      if (i > 0) {
        EXPECT_GE(result.scores[i - 1].score, score.score) << "entry " << i << " of " << node + 1;
      }
    }
    EXPECT_EQ(result.scores.front().prefix_blocks, 4u);
    EXPECT_EQ(result.scores.back().prefix_blocks, 1u);
  }
}

TEST_F(BlockIndexTest, SaltScopesNeverMeet) {
  const auto ab = Chain(1, 2);
  ASSERT_TRUE(Store(ab, kGpu0, /*scope=*/1).ok());
  const LookupResult other = index_->Lookup(/*scope=*/2, ab);
  EXPECT_EQ(other.matched_blocks, 0u);
  EXPECT_TRUE(other.scores.empty()) << "no score may reveal another scope's blocks";
  EXPECT_EQ(index_->Lookup(1, ab).matched_blocks, 2u);
  // The same keys stored under another scope are refused, and nothing changes.
  const Status s = Store(ab, kGpu1, /*scope=*/2);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("another salt scope"), std::string::npos) << s;
  EXPECT_EQ(index_->Held(1, Tier::kGpu), 0u);
}

TEST_F(BlockIndexTest, BadEventsAreRefusedAndChangeNothing) {
  const auto ab = Chain(1, 2);
  ASSERT_TRUE(Store(ab, kGpu0).ok());
  const BlockIndexStats before = index_->Stats();

  const Status unknown_parent = Store(Chain(10, 2), kGpu0, 0, Chain(500, 1)[0]);
  EXPECT_EQ(unknown_parent.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(unknown_parent.message().find("is not indexed"), std::string::npos) << unknown_parent;

  const Status bad_priority = Store(Chain(20, 2), kGpu0, 0, std::nullopt, {{35, {}}, {101, {}}});
  EXPECT_EQ(bad_priority.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_priority.message().find("priority 101 is out of range [0, 100]"), std::string::npos)
      << bad_priority;

  EXPECT_EQ(Store(Chain(30, 3), kGpu0, 0, std::nullopt, {{35, {}}}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Store({Chain(40, 1)[0], Chain(40, 1)[0]}, kGpu0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Store(Chain(50, 1), {kMaxNodes, Tier::kGpu, 0}).code(), StatusCode::kInvalidArgument);
  // Block 1 re-stored as the root of a chain: its parent would change.
  EXPECT_EQ(Store({ab[1]}, kGpu0).code(), StatusCode::kInvalidArgument);

  const BlockIndexStats after = index_->Stats();
  EXPECT_EQ(after.blocks, before.blocks);
  EXPECT_EQ(after.locations, before.locations);
  EXPECT_EQ(index_->Held(0, Tier::kGpu), 2u);
}

TEST_F(BlockIndexTest, LowestPriorityIsEvictedFirstWhateverItsRecency) {
  ASSERT_TRUE(
      Store(Chain(100, 1), kGpu0, 0, std::nullopt, {{50, {}}}).ok());  // oldest, priority 50
  ASSERT_TRUE(Store(Chain(200, 1), kGpu0, 0, std::nullopt, {{10, {}}}).ok());  // priority 10
  ASSERT_TRUE(Store(Chain(300, 1), kGpu0).ok());                               // newest, default 35
  const std::vector<BlockKey> order = index_->Evict(0, Tier::kGpu, 3);
  EXPECT_EQ(order, (std::vector<BlockKey>{Chain(200, 1)[0], Chain(300, 1)[0], Chain(100, 1)[0]}));
  const auto& evictions = index_->Stats().evictions_by_priority;
  EXPECT_EQ(evictions[10], 1u);
  EXPECT_EQ(evictions[35], 1u);
  EXPECT_EQ(evictions[50], 1u);
  EXPECT_EQ(index_->Held(0, Tier::kGpu), 0u);
  EXPECT_EQ(index_->Stats().blocks, 0u);
}

TEST_F(BlockIndexTest, LeastRecentlyUsedFirstWithinAPriority) {
  const auto x = Chain(100, 1), y = Chain(200, 1);
  ASSERT_TRUE(Store(x, kGpu0).ok());
  ASSERT_TRUE(Store(y, kGpu0).ok());
  index_->Touch(0, 0, x);  // x used again: y is now the least recent
  EXPECT_EQ(index_->Evict(0, Tier::kGpu, 1), y);
}

TEST_F(BlockIndexTest, LeavesGoBeforeTheirAncestors) {
  const auto abc = Chain(1, 3);
  const auto other = Chain(50, 1);
  ASSERT_TRUE(Store(abc, kGpu0).ok());
  ASSERT_TRUE(Store(other, kGpu0).ok());
  index_->Touch(0, 0, abc);  // the chain is more recent than `other`
  EXPECT_EQ(index_->Evict(0, Tier::kGpu, 4),
            (std::vector<BlockKey>{other[0], abc[2], abc[1], abc[0]}));
}

TEST_F(BlockIndexTest, InteriorBlockHeldElsewhereWaitsForItsLocalChildren) {
  const auto abc = Chain(1, 3);
  ASSERT_TRUE(Store(abc, kGpu0).ok());
  ASSERT_TRUE(Store({abc[0]}, kGpu1).ok());
  // On node 1 block 0 is a leaf, on node 0 it is interior until blocks 1 and 2 go.
  EXPECT_EQ(index_->Evict(1, Tier::kGpu, 1), std::vector<BlockKey>{abc[0]});
  EXPECT_EQ(index_->Evict(0, Tier::kGpu, 1), std::vector<BlockKey>{abc[2]});
}

TEST_F(BlockIndexTest, RetentionExpiresBackToDefaultPriority) {
  const auto old_default = Chain(100, 1);
  const auto kept_low = Chain(200, 1);
  ASSERT_TRUE(Store(old_default, kGpu0).ok());
  ASSERT_TRUE(Store(kept_low, kGpu0, 0, std::nullopt, {{20, seconds(5)}}).ok());
  clock_.Advance(seconds(4));
  index_->AdvanceTime();
  EXPECT_EQ(index_->Stats().expirations, 0u);
  // Still priority 20 after 4 s: kept_low is evicted before the older default block.
  ASSERT_TRUE(Store(kept_low, kGpu1, 0, std::nullopt, {{20, seconds(5)}}).ok());
  EXPECT_EQ(index_->Evict(1, Tier::kGpu, 1), kept_low);

  ASSERT_TRUE(Store(Chain(300, 1), kGpu1, 0, std::nullopt, {{20, seconds(5)}}).ok());
  clock_.Advance(seconds(6));
  index_->AdvanceTime();
  EXPECT_GE(index_->Stats().expirations, 1u);
  // Reverted to 35 and counted as recent at its new priority: the older default block goes first.
  EXPECT_EQ(index_->Evict(0, Tier::kGpu, 1), old_default);
}

TEST_F(BlockIndexTest, RestoringReplacesRetentionAndVoidsTheOldDeadline) {
  const auto p = Chain(1, 1), q = Chain(2, 1);
  ASSERT_TRUE(Store(p, kGpu0, 0, std::nullopt, {{90, seconds(5)}}).ok());
  ASSERT_TRUE(Store(p, kGpu0, 0, std::nullopt, {{10, {}}}).ok());  // now 10, forever
  ASSERT_TRUE(Store(q, kGpu0).ok());
  clock_.Advance(seconds(10));
  index_->AdvanceTime();
  EXPECT_EQ(index_->Stats().expirations, 0u) << "the first deadline was replaced";
  EXPECT_EQ(index_->Evict(0, Tier::kGpu, 1), p) << "priority 10 goes before q's 35";
}

// A removed block's deadline goes with it: the next block stored in its slot keeps its own
// retention (the worker's pool had this bug, and block_pool_fuzz found it there).
TEST_F(BlockIndexTest, ARemovedBlocksDeadlineDoesNotReachTheNextBlockInItsPlace) {
  const auto p = Chain(1, 1), q = Chain(2, 1), r = Chain(3, 1);
  ASSERT_TRUE(Store(p, kGpu0, 0, std::nullopt, {{90, seconds(5)}}).ok());   // p90 for 5 s
  EXPECT_EQ(index_->Remove(kGpu0, p), 1u);                                  // p gone, its slot free
  ASSERT_TRUE(Store(q, kGpu0, 0, std::nullopt, {{10, seconds(30)}}).ok());  // q: p10 for 30 s
  ASSERT_TRUE(Store(r, kGpu0).ok());                                        // r: the default, 35
  clock_.Advance(seconds(10));  // p's deadline passed, q's has not
  index_->AdvanceTime();
  EXPECT_EQ(index_->Stats().expirations, 0u) << "p's deadline died with p";
  EXPECT_EQ(index_->Evict(0, Tier::kGpu, 1), q) << "q keeps priority 10 and goes before r's 35";
}

TEST_F(BlockIndexTest, RemovedInteriorBlockBreaksThePrefixButKeepsItsChildren) {
  const auto abc = Chain(1, 3);
  ASSERT_TRUE(Store(abc, kGpu0).ok());
  EXPECT_EQ(index_->Remove(kGpu0, std::vector<BlockKey>{abc[1]}), 1u);
  EXPECT_EQ(index_->Lookup(0, abc).matched_blocks, 1u) << "block 1 is no longer cached anywhere";
  EXPECT_EQ(index_->Held(0, Tier::kGpu), 2u);
  // Block 1 comes back: block 0 must still count it as a child (not a leaf).
  ASSERT_TRUE(Store({abc[1]}, kGpu0, 0, abc[0]).ok());
  EXPECT_EQ(index_->Lookup(0, abc).matched_blocks, 3u);
  EXPECT_EQ(index_->Evict(0, Tier::kGpu, 3), (std::vector<BlockKey>{abc[2], abc[1], abc[0]}));
}

TEST_F(BlockIndexTest, DemotionOffloadsAdmittedVictimsAndKeepsLeafOrderBelow) {
  const auto abc = Chain(1, 3);
  const Location host{0, Tier::kHost, 0};
  ASSERT_TRUE(Store(abc, kGpu0).ok());
  std::vector<BlockKey> demoted;
  // Block 2 (the leaf) leaves the GPU for host memory.
  EXPECT_EQ(index_->Demote(0, Tier::kGpu, host, 1, {}, &demoted), std::vector<BlockKey>{abc[2]});
  EXPECT_EQ(demoted, std::vector<BlockKey>{abc[2]});
  LookupResult result = index_->Lookup(0, abc);
  EXPECT_EQ(result.matched_blocks, 3u);
  ASSERT_EQ(result.scores.size(), 1u);
  EXPECT_DOUBLE_EQ(result.scores[0].score, 2.5)
      << "blocks 0,1 on GPU (1.0 each), block 2 on host (0.5)";
  // Blocks 1 and 0 follow, but the filter admits only block 0.
  demoted.clear();
  const auto admit_root = [&](const BlockKey& key) { return key == abc[0]; };
  EXPECT_EQ(index_->Demote(0, Tier::kGpu, host, 2, admit_root, &demoted),
            (std::vector<BlockKey>{abc[1], abc[0]}));
  EXPECT_EQ(demoted, std::vector<BlockKey>{abc[0]});
  EXPECT_EQ(index_->Held(0, Tier::kGpu), 0u);
  EXPECT_EQ(index_->Held(0, Tier::kHost), 2u);
  EXPECT_EQ(index_->Lookup(0, abc).matched_blocks, 1u)
      << "block 1 was dropped, so the prefix stops after block 0";
}

TEST_F(BlockIndexTest, ParentArrivingBelowItsChildIsInteriorThere) {
  const auto ab = Chain(1, 2);
  const Location host{0, Tier::kHost, 0};
  ASSERT_TRUE(Store(ab, kGpu0).ok());
  std::vector<BlockKey> demoted;
  index_->Demote(0, Tier::kGpu, host, 2, {}, &demoted);  // the child reaches host first
  EXPECT_EQ(demoted, (std::vector<BlockKey>{ab[1], ab[0]}));
  EXPECT_EQ(index_->Evict(0, Tier::kHost, 1), std::vector<BlockKey>{ab[1]})
      << "the child goes first on host too";
}

TEST_F(BlockIndexTest, RemoveNodeDropsEveryLocationOfTheNode) {
  const auto abc = Chain(1, 3);
  ASSERT_TRUE(Store(abc, kGpu0).ok());
  ASSERT_TRUE(Store(abc, kHost1).ok());
  ASSERT_TRUE(Store(Chain(10, 2), kGpu0).ok());
  EXPECT_EQ(index_->RemoveNode(0), 5u);
  EXPECT_EQ(index_->Held(0, Tier::kGpu), 0u);
  const LookupResult result = index_->Lookup(0, abc);
  EXPECT_EQ(result.matched_blocks, 3u);
  ASSERT_EQ(result.scores.size(), 1u);
  EXPECT_EQ(result.scores[0].node, 1);
  EXPECT_EQ(index_->Stats().blocks, 3u);
}

TEST(BlockIndexLimitTest, AChainPastMaxBlocksIsRefusedWholeUntilThereIsRoom) {
  FakeClock clock{seconds(1000)};
  BlockIndexOptions options;
  options.clock = &clock;
  options.max_blocks = 5;
  std::unique_ptr<BlockIndex> index = *BlockIndex::Create(options);
  const auto abc = Chain(1, 3);
  ASSERT_TRUE(index->Store({0, std::nullopt, abc, kGpu0}).ok());  // blocks 0-2: 3 of 5
  // Blocks 0-2 again on another node plus 3 new: 6 in all, one past the limit.
  const auto abcdef = Chain(1, 6);
  const Status refused = index->Store({0, std::nullopt, abcdef, kGpu1});
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused.ToString();
  EXPECT_NE(refused.message().find("limit of 5"), std::string::npos) << refused.message();
  EXPECT_EQ(index->Stats().blocks, 3u) << "nothing of the refused chain was stored";
  EXPECT_EQ(index->Stats().refused_full, 1u);
  EXPECT_EQ(index->Lookup(0, abcdef).scores.size(), 1u) << "node 1 gained no location";
  // Blocks 1,2 leave node 0 and the index: room for the chain of five (blocks 0-4).
  EXPECT_EQ(index->Remove(kGpu0, std::vector<BlockKey>{abc[1], abc[2]}), 2u);
  ASSERT_TRUE(index->Store({0, std::nullopt, Chain(1, 5), kGpu1}).ok());
  EXPECT_EQ(index->Stats().blocks, 5u);
  EXPECT_EQ(index->Lookup(0, abcdef).matched_blocks, 5u);
}

TEST(BlockIndexLimitTest, MaxBlocksOutOfRangeIsRefusedAtCreate) {
  BlockIndexOptions options;
  options.max_blocks = 0;
  EXPECT_EQ(BlockIndex::Create(options).status().code(), StatusCode::kInvalidArgument);
  options.max_blocks = kMaxIndexBlocks + 1;
  const Status too_many = BlockIndex::Create(options).status();
  EXPECT_EQ(too_many.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_many.message().find("max_blocks"), std::string::npos) << too_many.message();
}

class BlockIndexMemoryTest : public ::testing::TestWithParam<uint32_t> {};

// Window 0: full attention. Window 16: every chain's leaf is counted by the 15 blocks
// above it (a count in each of their locations).
INSTANTIATE_TEST_SUITE_P(FullAndWindowed, BlockIndexMemoryTest, ::testing::Values(0u, 16u));

TEST_P(BlockIndexMemoryTest, MemoryPerBlockStaysUnder64Bytes) {
  // 100,000 blocks in chains of 20, one location each, in an index sized for them.
  BlockIndexOptions options;
  options.expected_blocks = 100000;
  std::unique_ptr<BlockIndex> index = *BlockIndex::Create(options);
  if (GetParam() != 0) {
    const PoolWindowSpec windowed{kGpu0, {.window_blocks = GetParam(), .sink_blocks = 1}};
    ASSERT_TRUE(index->SetNodeWindows(0, std::span(&windowed, 1)).ok());
  }
  const auto store = [&](const std::vector<BlockKey>& keys) {
    return index->Store({0, std::nullopt, keys, kGpu0, {}});
  };
  for (uint64_t chain = 0; chain < 5000; ++chain) ASSERT_TRUE(store(Chain(chain * 20, 20)).ok());
  const BlockIndexStats stats = index->Stats();
  EXPECT_EQ(stats.blocks, 100000u);
  EXPECT_LE(static_cast<double>(stats.memory_bytes) / static_cast<double>(stats.blocks), 64.0);
}

}  // namespace
}  // namespace kvtier::coordinator
