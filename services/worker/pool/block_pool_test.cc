#include "services/worker/pool/block_pool.h"
#include "services/worker/pool/block_pool_testing.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace kvtier::worker {
namespace {

using namespace std::chrono_literals;

using testing::kRoot;
using testing::kTpb;
using testing::MakePool;
using testing::Tokens;

BlockKey Key(uint64_t n) { return BlockKey{0x1000 + n, n * 7919}; }

// Starts a sequence whose full blocks are keyed by `keys`, and commits them.
SequenceStart StartAndCommit(BlockPool& pool, SequenceId id, const std::vector<BlockKey>& keys,
                             const std::vector<uint32_t>& tokens,
                             std::vector<BlockRetention> retention = {}) {
  auto start = pool.StartSequence({id, kRoot, 0, 0, keys, tokens});
  EXPECT_TRUE(start.ok()) << start.status().ToString();
  EXPECT_TRUE(pool.Commit(id, keys, tokens, retention).ok());
  return std::move(start).value();
}

TEST(BlockPoolTest, AllocateAndFreeBlankBlocks) {
  auto pool = MakePool(4);
  std::vector<BlockId> blocks;
  std::vector<EvictedBlock> evicted;
  ASSERT_TRUE(pool->AllocateBlocks(3, &blocks, &evicted).ok());
  EXPECT_EQ(blocks, (std::vector<BlockId>{0, 1, 2}));
  EXPECT_EQ(pool->Stats().in_use, 3u);
  // 2 more than the 1 left: refused, and nothing was taken.
  std::vector<BlockId> more;
  const Status full = pool->AllocateBlocks(2, &more, &evicted);
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("2 blocks needed, 1 free and 0 evictable of 4"), std::string::npos)
      << full.message();
  EXPECT_TRUE(more.empty());
  ASSERT_TRUE(pool->FreeBlocks(blocks).ok());
  EXPECT_EQ(pool->Stats().free, 4u);
  EXPECT_TRUE(evicted.empty());
}

TEST(BlockPoolTest, DoubleFreesAndForeignIdsAreRefusedAndChangeNothing) {
  auto pool = MakePool(4);
  std::vector<BlockId> blocks;
  std::vector<EvictedBlock> evicted;
  ASSERT_TRUE(pool->AllocateBlocks(2, &blocks, &evicted).ok());  // blocks 0, 1
  EXPECT_EQ(pool->FreeBlocks(std::vector<BlockId>{0, 7}).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(pool->FreeBlocks(std::vector<BlockId>{1, 1}).code(),
            StatusCode::kFailedPrecondition);  // one reference
  EXPECT_EQ(pool->FreeBlocks(std::vector<BlockId>{2}).code(),
            StatusCode::kFailedPrecondition);  // never allocated
  EXPECT_EQ(pool->Stats().in_use, 2u) << "the refused frees dropped nothing";
  ASSERT_TRUE(pool->FreeBlocks(blocks).ok());
  EXPECT_EQ(pool->FreeBlocks(std::vector<BlockId>{0}).code(), StatusCode::kFailedPrecondition);
}

// FreeBlocks drops only what AllocateBlocks gave: a sequence's blocks are its own until
// FreeSequence (block_pool_fuzz found a free here, and the sequence's free then took
// the block's count below zero).
TEST(BlockPoolTest, FreeBlocksRefusesASequencesBlocks) {
  auto pool = MakePool(4);
  const SequenceStart start =
      StartAndCommit(*pool, 1, {Key(0)}, Tokens(0, 6));  // blocks 0 (committed) and 1 (blank)
  ASSERT_EQ(start.block_table.size(), 2u);
  const Status committed = pool->FreeBlocks(std::vector<BlockId>{start.block_table[0]});
  EXPECT_EQ(committed.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(committed.message().find("not held by AllocateBlocks"), std::string::npos)
      << committed.message();
  EXPECT_EQ(pool->FreeBlocks(std::vector<BlockId>{start.block_table[1]}).code(),
            StatusCode::kFailedPrecondition);
  // A blank block held for writing is still the sequence's, not the caller's.
  ASSERT_TRUE(pool->HoldForWriting(std::vector<BlockId>{start.block_table[1]}).ok());
  EXPECT_EQ(pool->FreeBlocks(std::vector<BlockId>{start.block_table[1]}).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(pool->Stats().in_use, 2u) << "the refused frees dropped nothing";
  ASSERT_TRUE(pool->ReleaseBlocks(std::vector<BlockId>{start.block_table[1]}).ok());
  ASSERT_TRUE(pool->FreeSequence(1).ok());
  const BlockPoolStats stats = pool->Stats();
  EXPECT_EQ(stats.free, 3u) << "the blank block is back";
  EXPECT_EQ(stats.cached, 1u) << "the committed block stays cached";
  // Allocated again by AllocateBlocks, the same block is the caller's to free, once.
  std::vector<BlockId> blocks;
  std::vector<EvictedBlock> evicted;
  ASSERT_TRUE(pool->AllocateBlocks(3, &blocks, &evicted).ok());
  ASSERT_TRUE(pool->FreeBlocks(blocks).ok());
  EXPECT_EQ(pool->FreeBlocks(std::vector<BlockId>{blocks[0]}).code(),
            StatusCode::kFailedPrecondition);
}

TEST(BlockPoolTest, SequencesShareCachedPrefixBlocks) {
  auto pool = MakePool(16);
  // Sequence 1: 3 full blocks and 2 more tokens.
  const SequenceStart a = StartAndCommit(*pool, 1, {Key(0), Key(1), Key(2)}, Tokens(0, 14));
  EXPECT_EQ(a.block_table.size(), 4u);
  EXPECT_EQ(a.reused_blocks, 0u);
  // Sequence 2 shares blocks 0 and 1; its block 2 differs from the first token on.
  auto b = pool->StartSequence({2, kRoot, 0, 0, std::vector<BlockKey>{Key(0), Key(1), Key(9)}, [] {
                                  auto t = Tokens(0, 12);
                                  t[8] = 1000;
                                  return t;
                                }()});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->reused_blocks, 2u);
  EXPECT_EQ(b->reused_tokens, 8u);
  EXPECT_EQ(b->block_table[0], a.block_table[0]);
  EXPECT_EQ(b->block_table[1], a.block_table[1]);
  EXPECT_NE(b->block_table[2], a.block_table[2]);
  EXPECT_EQ(pool->Stats().in_use, 5u) << "4 for sequence 1, 1 new for sequence 2";
  // Both leave; the committed blocks stay cached, the uncommitted ones are free again.
  ASSERT_TRUE(pool->FreeSequence(1).ok());
  ASSERT_TRUE(pool->FreeSequence(2).ok());
  EXPECT_EQ(pool->Stats().cached, 3u);
  EXPECT_EQ(pool->LookupPrefix(kRoot, std::vector<BlockKey>{Key(0), Key(1), Key(2)}), 3u);
  EXPECT_EQ(pool->LookupPrefix(BlockKey{2, 2}, std::vector<BlockKey>{Key(0)}), 0u)
      << "another salt's root";
}

TEST(BlockPoolTest, PartialReuseInPlaceWhenNothingElseUsesTheBlock) {
  auto pool = MakePool(8);
  const SequenceStart a = StartAndCommit(*pool, 1, {Key(0)}, {10, 11, 12, 13});
  ASSERT_TRUE(pool->FreeSequence(1).ok());
  pool->TakeEvents();
  // Tokens 10, 11 match the cached block; 99 does not.
  auto b = pool->StartSequence({2, kRoot, 0, 0, {}, std::vector<uint32_t>{10, 11, 99}});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->reused_tokens, 2u);
  EXPECT_FALSE(b->copy.has_value());
  EXPECT_EQ(b->block_table, (std::vector<BlockId>{a.block_table[0]})) << "taken over in place";
  const auto events = pool->TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, PoolEvent::Kind::kRemoved) << "its tail will change: no longer cached";
  EXPECT_EQ(pool->LookupPrefix(kRoot, std::vector<BlockKey>{Key(0)}), 0u);
}

TEST(BlockPoolTest, CopyOnPartialReuseWhenAnotherSequenceStillUsesTheBlock) {
  auto pool = MakePool(8);
  const SequenceStart a = StartAndCommit(*pool, 1, {Key(0), Key(1)}, Tokens(0, 8));
  // Same first block, then 3 of block 1's tokens (4, 5, 6) and a different one.
  auto b = pool->StartSequence({2, kRoot, 0, 0, std::vector<BlockKey>{Key(0), Key(5)},
                                std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 42}});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->reused_blocks, 1u);
  EXPECT_EQ(b->reused_tokens, 7u);
  ASSERT_TRUE(b->copy.has_value());
  EXPECT_EQ(b->copy->source, a.block_table[1]);
  EXPECT_EQ(b->copy->destination, b->block_table[1]);
  EXPECT_EQ(b->copy->tokens, 3u);
  EXPECT_EQ(pool->LookupPrefix(kRoot, std::vector<BlockKey>{Key(0), Key(1)}), 2u)
      << "the source stays cached";
  EXPECT_EQ(pool->Stats().partial_copies, 1u);
}

TEST(BlockPoolTest, AHeldBlockIsNeitherEvictedNorTakenOverUntilFreed) {
  auto pool = MakePool(2);
  const SequenceStart a = StartAndCommit(*pool, 1, {Key(0)}, {10, 11, 12, 13});
  ASSERT_TRUE(pool->FreeSequence(1).ok());
  const BlockId held = a.block_table[0];
  ASSERT_TRUE(pool->HoldBlocks(std::vector<BlockId>{held}).ok());  // a peer's fetch copies it
  EXPECT_EQ(pool->Stats().in_use, 1u);
  EXPECT_EQ(pool->Stats().cached, 0u) << "not evictable while held";
  // Tokens 10, 11 match the held block: copied, not taken over in place.
  auto b = pool->StartSequence({2, kRoot, 0, 0, {}, std::vector<uint32_t>{10, 11, 99}});
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(b->copy.has_value());
  EXPECT_EQ(b->copy->source, held);
  // The one other block is in use: a third block would need the held one, and is refused.
  std::vector<BlockId> more;
  std::vector<EvictedBlock> evicted;
  EXPECT_EQ(pool->AllocateBlocks(1, &more, &evicted).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(pool->FreeBlocks(std::vector<BlockId>{held}).code(), StatusCode::kFailedPrecondition)
      << "a hold is not a reference that a (double) free drops";
  ASSERT_TRUE(pool->ReleaseBlocks(std::vector<BlockId>{held}).ok());  // the fetch is done
  EXPECT_EQ(pool->ReleaseBlocks(std::vector<BlockId>{held}).code(), StatusCode::kFailedPrecondition)
      << "released twice";
  EXPECT_EQ(pool->Stats().cached, 1u);
  EXPECT_EQ(pool->LookupPrefix(kRoot, std::vector<BlockKey>{Key(0)}), 1u)
      << "still cached under its key";
  ASSERT_TRUE(pool->AllocateBlocks(1, &more, &evicted).ok());
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].block, held) << "evictable again once freed";
}

TEST(BlockPoolTest, TheHeldCountIsOfBlocksNotOfHolds) {
  auto pool = MakePool(4);
  const SequenceStart a = StartAndCommit(*pool, 1, {Key(0), Key(1)}, Tokens(0, 8));
  const BlockId first = a.block_table[0], second = a.block_table[1];
  // Two peers fetch block `first`, one of them block `second` too.
  ASSERT_TRUE(pool->HoldBlocks(std::vector<BlockId>{first, second}).ok());
  ASSERT_TRUE(pool->HoldBlocks(std::vector<BlockId>{first}).ok());
  EXPECT_EQ(pool->Stats().held, 2u);
  ASSERT_TRUE(pool->ReleaseBlocks(std::vector<BlockId>{first}).ok());
  EXPECT_EQ(pool->Stats().held, 2u) << "block " << first << " is still held by the other peer";
  ASSERT_TRUE(pool->ReleaseBlocks(std::vector<BlockId>{first, second}).ok());
  EXPECT_EQ(pool->Stats().held, 0u);
  EXPECT_EQ(pool->ReleaseBlocks(std::vector<BlockId>{second}).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(pool->Stats().held, 0u) << "a refused release changes nothing";
}

TEST(BlockPoolTest, HoldingABlankOrForeignBlockAndReleasingAnUnheldOneAreRefused) {
  auto pool = MakePool(4);
  const SequenceStart a =
      StartAndCommit(*pool, 1, {Key(0)}, Tokens(0, 6));  // block 0 committed, block 1 not
  ASSERT_EQ(a.block_table.size(), 2u);
  const BlockId committed = a.block_table[0];
  EXPECT_EQ(pool->HoldBlocks(std::vector<BlockId>{committed, a.block_table[1]}).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(pool->HoldBlocks(std::vector<BlockId>{committed, 9}).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(pool->ReleaseBlocks(std::vector<BlockId>{committed}).code(),
            StatusCode::kFailedPrecondition)
      << "never held";
  ASSERT_TRUE(pool->FreeSequence(1).ok());
  EXPECT_EQ(pool->Stats().cached, 1u)
      << "the refused holds took no reference on block " << committed;
  EXPECT_EQ(pool->Stats().in_use, 0u);
  EXPECT_EQ(pool->Stats().held, 0u);
}

// A pool of 2 blocks; sequence 1 holds block 0 committed and block 1 blank. A fetch
// landing in block 1 holds it; the sequence is freed meanwhile: block 1 is not handed out
// again (two blocks cannot be allocated) until the fetch gives it back, and then
// goes back blank (not cached). Committed and unreferenced blocks are not held for writing.
TEST(BlockPoolTest, ABlankBlockHeldForWritingOutlivesItsSequenceUntilReleased) {
  auto pool = MakePool(2);
  const SequenceStart a = StartAndCommit(*pool, 1, {Key(0)}, Tokens(0, 6));
  const BlockId committed = a.block_table[0], blank = a.block_table[1];
  EXPECT_EQ(pool->HoldForWriting(std::vector<BlockId>{blank, committed}).code(),
            StatusCode::kFailedPrecondition)
      << "block " << committed << " is committed";
  EXPECT_EQ(pool->HoldForWriting(std::vector<BlockId>{9}).code(), StatusCode::kOutOfRange);
  ASSERT_TRUE(pool->HoldForWriting(std::vector<BlockId>{blank}).ok());
  EXPECT_EQ(pool->Stats().held, 1u);
  ASSERT_TRUE(pool->FreeSequence(1).ok());
  EXPECT_EQ(pool->Stats().in_use, 1u) << "block " << blank << ", held";
  std::vector<BlockId> more;
  std::vector<EvictedBlock> evicted;
  EXPECT_EQ(pool->AllocateBlocks(2, &more, &evicted).code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(pool->ReleaseBlocks(std::vector<BlockId>{blank}).ok());
  EXPECT_EQ(pool->Stats().held, 0u);
  EXPECT_EQ(pool->Stats().free, 1u) << "blank again, not cached";
  EXPECT_EQ(pool->Stats().cached, 1u);
  EXPECT_EQ(pool->HoldForWriting(std::vector<BlockId>{blank}).code(),
            StatusCode::kFailedPrecondition)
      << "a free block is in no sequence";
  EXPECT_TRUE(pool->AllocateBlocks(2, &more, &evicted).ok());
}

// Sequence 1 commits block 0 (and block 1 as block 1's tokens are written). A reader
// holding block 0 gives back its checksum: kept while block 0 stays committed, given in
// Find. A block not held keeps nothing; once block 0 is evicted and committed anew, the
// new block starts with none.
TEST(BlockPoolTest, AHeldBlocksChecksumIsKeptWhileItStaysCommitted) {
  auto pool = MakePool(2);
  const SequenceStart a = StartAndCommit(*pool, 1, {Key(0), Key(1)}, Tokens(0, 8));
  const BlockId b0 = a.block_table[0], b1 = a.block_table[1];
  ASSERT_TRUE(pool->HoldBlocks(std::vector<BlockId>{b0}).ok());
  EXPECT_EQ(pool->RememberChecksums(std::vector<BlockId>{b0}, std::vector<uint64_t>{}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(pool->RememberChecksums(std::vector<BlockId>{9}, std::vector<uint64_t>{1}).code(),
            StatusCode::kOutOfRange);
  ASSERT_TRUE(
      pool->RememberChecksums(std::vector<BlockId>{b0, b1}, std::vector<uint64_t>{0xabc, 0xdef})
          .ok());
  EXPECT_EQ(pool->Find(Key(0))->checksum, 0xabcu);
  EXPECT_EQ(pool->Find(Key(1))->checksum, 0u) << "block 1 was not held";
  ASSERT_TRUE(pool->ReleaseBlocks(std::vector<BlockId>{b0}).ok());
  EXPECT_EQ(pool->Find(Key(0))->checksum, 0xabcu) << "kept after the hold";

  ASSERT_TRUE(pool->FreeSequence(1).ok());
  std::vector<BlockId> blanks;
  std::vector<EvictedBlock> evicted;
  ASSERT_TRUE(pool->AllocateBlocks(2, &blanks, &evicted).ok());  // both evicted
  ASSERT_TRUE(pool->FreeBlocks(blanks).ok());
  StartAndCommit(*pool, 2, {Key(0)}, Tokens(0, 4));
  ASSERT_TRUE(pool->Find(Key(0)).has_value());
  EXPECT_EQ(pool->Find(Key(0))->checksum, 0u) << "committed anew: its bytes are new";
}

TEST(BlockPoolTest, WithoutTokensThereIsNoPartialReuse) {
  auto pool = MakePool(8);
  // Committed without its tokens: reusable by key, but no partial-reuse candidate.
  ASSERT_TRUE(pool->StartSequence({1, kRoot, 0, 0, std::vector<BlockKey>{Key(0)}, {}, 4}).ok());
  ASSERT_TRUE(pool->Commit(1, std::vector<BlockKey>{Key(0)}, {}, {}).ok());
  auto by_key = pool->StartSequence({2, kRoot, 0, 0, std::vector<BlockKey>{Key(0)}, {}, 6});
  ASSERT_TRUE(by_key.ok());
  EXPECT_EQ(by_key->reused_tokens, 4u);
  auto partial = pool->StartSequence({3, kRoot, 0, 0, {}, std::vector<uint32_t>{0, 1}});
  ASSERT_TRUE(partial.ok());
  EXPECT_EQ(partial->reused_tokens, 0u) << "block 0's tokens are unknown";
  EXPECT_EQ(
      pool->StartSequence({4, kRoot, 0, 0, {}, std::vector<uint32_t>{0, 1}, 3}).status().code(),
      StatusCode::kInvalidArgument)
      << "num_tokens disagrees with the tokens";
}

TEST(BlockPoolTest, EvictsLowestPriorityFirstThenLeastRecentThenLeavesFirst) {
  auto pool = MakePool(6);
  // Chains (each committed, then released): A = a0 <- a1 at priority 50; B = b0 at 20;
  // C = c0 <- c1 at 35 (default). Released in the order A, B, C.
  StartAndCommit(*pool, 1, {Key(10), Key(11)}, Tokens(0, 8), {{50, 0ns}, {50, 0ns}});
  StartAndCommit(*pool, 2, {Key(20)}, Tokens(100, 4), {{20, 0ns}});
  StartAndCommit(*pool, 3, {Key(30), Key(31)}, Tokens(200, 8));
  for (SequenceId id : {1, 2, 3}) ASSERT_TRUE(pool->FreeSequence(id).ok());
  pool->TakeEvents();
  std::vector<BlockId> blocks;
  std::vector<EvictedBlock> evicted;
  ASSERT_TRUE(pool->AllocateBlocks(6, &blocks, &evicted).ok());
  std::vector<BlockKey> order;
  for (const EvictedBlock& e : evicted) order.push_back(e.key);
  // Priority 20 first; then priority 35 leaf c1 before its parent c0; then priority 50.
  EXPECT_EQ(order, (std::vector<BlockKey>{Key(20), Key(31), Key(30), Key(11), Key(10)}));
  EXPECT_FALSE(evicted[0].offload)
      << "priority 20 is below secondary_offload_min_priority 35: dropped";
  EXPECT_TRUE(evicted[1].offload);
  const auto events = pool->TakeEvents();
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[0].kind, PoolEvent::Kind::kRemoved);
  EXPECT_EQ(events[1].kind, PoolEvent::Kind::kOffloaded);
  for (size_t i = 1; i < events.size(); ++i)
    EXPECT_EQ(events[i].sequence, events[i - 1].sequence + 1);
  EXPECT_EQ(pool->Stats().evictions_by_priority[50], 2u);
}

// What a snapshot lists: committed blocks only, with their chain links, priority and the
// retention left.
TEST(BlockPoolTest, HoldingsListCommittedBlocksWithRetentionLeft) {
  FakeClock clock;
  auto pool = MakePool(4, {.clock = &clock});
  // Sequence 1: blocks 1 (p80 for 10 s) and 2 (p50 for good) committed; sequence 2 holds an
  // uncommitted block.
  StartAndCommit(*pool, 1, {Key(1), Key(2)}, Tokens(0, 8), {{80, 10s}, {50, 0ns}});
  ASSERT_TRUE(pool->StartSequence({2, kRoot, 0, 0, {}, Tokens(90, 3)}).ok());
  clock.Advance(4s);
  const std::vector<PoolEvent> events = pool->TakeEvents();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].retention, 10s) << "the stored event carries the retention too";
  EXPECT_EQ(events[1].retention, 0ns);
  std::vector<PoolHolding> holdings = pool->Holdings();
  ASSERT_EQ(holdings.size(), 2u) << "the uncommitted block is not listed";
  std::sort(holdings.begin(), holdings.end(),
            [](const auto& a, const auto& b) { return a.key.lo < b.key.lo; });
  EXPECT_EQ(holdings[0].key, Key(1));
  EXPECT_TRUE(holdings[0].first);
  EXPECT_EQ(holdings[0].priority, 80);
  EXPECT_EQ(holdings[0].retention_left, 6s);
  EXPECT_EQ(holdings[1].key, Key(2));
  EXPECT_FALSE(holdings[1].first);
  EXPECT_EQ(holdings[1].parent, Key(1));
  EXPECT_EQ(holdings[1].priority, 50);
  EXPECT_EQ(holdings[1].retention_left, 0ns) << "no expiry";
  // Freed, block 1 stays cached and listed until evicted.
  ASSERT_TRUE(pool->FreeSequence(1).ok());
  EXPECT_EQ(pool->Holdings().size(), 2u);
}

TEST(BlockPoolTest, RetentionExpiresBackToTheDefaultPriority) {
  FakeClock clock;
  auto pool = MakePool(2, {.clock = &clock});
  StartAndCommit(*pool, 1, {Key(1)}, Tokens(0, 4), {{80, 10s}});   // high for 10 s
  StartAndCommit(*pool, 2, {Key(2)}, Tokens(50, 4), {{50, 0ns}});  // 50 for good
  ASSERT_TRUE(pool->FreeSequence(1).ok());
  ASSERT_TRUE(pool->FreeSequence(2).ok());
  clock.Advance(11s);
  pool->AdvanceTime();
  std::vector<BlockId> blocks;
  std::vector<EvictedBlock> evicted;
  ASSERT_TRUE(pool->AllocateBlocks(1, &blocks, &evicted).ok());
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].key, Key(1)) << "80 expired to 35, below 50";
  EXPECT_EQ(evicted[0].priority, 35);
}

// A block's retention ends with its commit: once evicted, the block committed again under
// another key must not inherit the old deadline (block_pool_fuzz found it did).
TEST(BlockPoolTest, AnEvictedBlocksOldRetentionDoesNotReachItsNextCommit) {
  FakeClock clock;
  auto pool = MakePool(1, {.clock = &clock});
  // Block 0 holds Key(1) at p80 for 10 s, then is evicted for sequence 2's Key(2).
  StartAndCommit(*pool, 1, {Key(1)}, Tokens(0, 4), {{80, 10s}});
  ASSERT_TRUE(pool->FreeSequence(1).ok());
  // Key(2) at p90 for 30 s, in the same block.
  const SequenceStart second = StartAndCommit(*pool, 2, {Key(2)}, Tokens(50, 4), {{90, 30s}});
  ASSERT_EQ(second.evicted.size(), 1u);
  ASSERT_EQ(second.block_table, (std::vector<BlockId>{0}));
  ASSERT_TRUE(pool->FreeSequence(2).ok());
  std::vector<PoolHolding> holdings = pool->Holdings();
  ASSERT_EQ(holdings.size(), 1u);
  EXPECT_EQ(holdings[0].retention_left, 30s) << "Key(2)'s own deadline, not Key(1)'s";
  clock.Advance(11s);  // Key(1)'s deadline passed, Key(2)'s has not
  pool->AdvanceTime();
  holdings = pool->Holdings();
  ASSERT_EQ(holdings.size(), 1u);
  EXPECT_EQ(holdings[0].priority, 90) << "Key(2) keeps p90 for its 30 s";
  EXPECT_EQ(holdings[0].retention_left, 19s);
}

TEST(BlockPoolTest, WindowedPoolReleasesBlocksThatLeaveTheWindowButKeepsSinks) {
  // 8-token window, 4 sink tokens, blocks of 4.
  auto pool = MakePool(8, {.window_tokens = 8, .sink_tokens = 4});
  auto start = pool->StartSequence({1, kRoot, 0, 0, std::vector<BlockKey>{Key(0)}, Tokens(0, 4)});
  ASSERT_TRUE(start.ok());
  ASSERT_TRUE(pool->Extend(1, 8).ok());  // 12 tokens: blocks 0, 1, 2; nothing left the window yet
  ASSERT_TRUE(
      pool->Commit(1, std::vector<BlockKey>{Key(0), Key(1), Key(2)}, Tokens(0, 12), {}).ok());
  // Decode to 20 tokens, one at a time: the last token's window is tokens 12-19. (A chunk
  // of 8 at once keeps what its first token, at 12, attends: tokens 5-12.)
  std::vector<BlockId> released;
  for (int t = 0; t < 8; ++t) {
    auto growth = pool->Extend(1, 1);
    ASSERT_TRUE(growth.ok());
    released.insert(released.end(), growth->released.begin(), growth->released.end());
  }
  const std::vector<BlockId> table = pool->BlockTable(1).value();
  ASSERT_EQ(table.size(), 5u);
  EXPECT_NE(table[0], kNoBlock) << "block 0 holds the sink tokens";
  EXPECT_EQ(table[1], kNoBlock);
  EXPECT_EQ(table[2], kNoBlock);
  EXPECT_EQ(released.size(), 2u);
  EXPECT_EQ(pool->Stats().cached, 2u) << "blocks 1 and 2 were committed: back in the reuse tree";
  // The pool fills: interior block 1, which left the window, is evicted although its
  // child block 2 is cached and block 3 is in use.
  std::vector<BlockId> blocks;
  std::vector<EvictedBlock> evicted;
  ASSERT_TRUE(pool->AllocateBlocks(4, &blocks, &evicted).ok());
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].key, Key(1));
}

TEST(BlockPoolTest, EvictsAnInteriorBlockWhenItsOnlyChildIsInUseThroughADuplicate) {
  auto pool = MakePool(4);
  // Sequences 1 and 2 start with the same first block before either commits it: two
  // copies. Sequence 1 commits it (block a); sequence 2's copy stays uncommitted, and its
  // second block commits with parent key 0, so a is its cached parent.
  ASSERT_TRUE(
      pool->StartSequence({1, kRoot, 0, 0, std::vector<BlockKey>{Key(0)}, Tokens(0, 4)}).ok());
  ASSERT_TRUE(
      pool->StartSequence({2, kRoot, 0, 0, std::vector<BlockKey>{Key(0)}, Tokens(0, 4)}).ok());
  ASSERT_TRUE(pool->Commit(1, std::vector<BlockKey>{Key(0)}, Tokens(0, 4), {}).ok());
  ASSERT_TRUE(pool->Extend(2, 4).ok());
  ASSERT_TRUE(pool->Commit(2, std::vector<BlockKey>{Key(0), Key(1)}, Tokens(0, 8), {}).ok());
  ASSERT_TRUE(pool->FreeSequence(1).ok());  // a: unreferenced, interior, the only evictable block
  std::vector<BlockId> blocks;
  std::vector<EvictedBlock> evicted;
  ASSERT_TRUE(pool->AllocateBlocks(2, &blocks, &evicted).ok());
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].key, Key(0));
  ASSERT_TRUE(pool->FreeSequence(2).ok());  // block 1 is now an unreferenced leaf
  ASSERT_TRUE(pool->FreeBlocks(blocks).ok());
  ASSERT_TRUE(pool->AllocateBlocks(4, &blocks, &evicted).ok());
  EXPECT_EQ(evicted.back().key, Key(1));
}

TEST(BlockPoolTest, BadRequestsAreRefusedAndChangeNothing) {
  auto pool = MakePool(4);
  StartAndCommit(*pool, 1, {Key(0)}, Tokens(0, 6));
  pool->TakeEvents();
  const BlockPoolStats before = pool->Stats();
  EXPECT_EQ(pool->StartSequence({1, kRoot, 0, 0, {}, Tokens(0, 2)}).status().code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(pool->StartSequence({2, kRoot, 0, 0, {}, Tokens(0, 5)}).status().code(),
            StatusCode::kInvalidArgument)
      << "5 tokens have 1 full block; no key given";
  EXPECT_EQ(pool->StartSequence({2, kRoot, 0, 0, {}, Tokens(0, 20)}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(pool->Extend(9, 1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(pool->Commit(1, std::vector<BlockKey>{Key(0), Key(1)}, Tokens(0, 8), {}).code(),
            StatusCode::kInvalidArgument)
      << "2 full blocks, but the sequence has 6 tokens";
  EXPECT_EQ(pool->Commit(1, std::vector<BlockKey>{Key(5)}, Tokens(0, 4), {}).code(),
            StatusCode::kInvalidArgument)
      << "block 0 is committed under another key";
  EXPECT_EQ(pool->Commit(1, std::vector<BlockKey>{Key(0)}, Tokens(0, 4),
                         std::vector<BlockRetention>{{101, 0ns}})
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(pool->StartSequence(
                    {3, kRoot, 0, 0, std::vector<BlockKey>{Key(7), Key(8), Key(9)}, Tokens(50, 12)})
                .status()
                .code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(pool->Stats().in_use, before.in_use);
  EXPECT_EQ(pool->Stats().free, before.free);
  EXPECT_TRUE(pool->TakeEvents().empty());
  EXPECT_EQ(BlockPool::Create({.num_blocks = 0, .tokens_per_block = 4}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      BlockPool::Create({.num_blocks = 4, .tokens_per_block = 4, .sink_tokens = 4}).status().code(),
      StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier::worker
