// The index's parts on their own: BlockTable (blocks, keys, slot chains, free lists),
// LruLists (per node, tier and priority) and PoolWindows.
#include "services/coordinator/index/block_table.h"

#include <vector>

#include <gtest/gtest.h>

#include "services/coordinator/index/lru_lists.h"
#include "services/coordinator/index/pool_windows.h"

namespace kvtier::coordinator::internal {
namespace {

BlockKey Key(uint64_t n) { return {n, ~n}; }

std::vector<uint32_t> HeldSlots(const BlockTable& table, uint32_t b) {
  std::vector<uint32_t> refs;
  table.ForEachSlot(b, [&](uint32_t ref) { refs.push_back(ref); });
  return refs;
}

TEST(BlockTableTest, BlocksAreFoundByKeyAndCountTheirChildren) {
  BlockTable table(16);
  const uint32_t root = table.NewBlock(Key(1), kNil, 7);
  const uint32_t child = table.NewBlock(Key(2), root, 7);
  EXPECT_EQ(table.Find(Key(1)), root);
  EXPECT_EQ(table.Find(Key(2)), child);
  EXPECT_EQ(table.Find(Key(3)), kNil);
  EXPECT_EQ(table[root].children, 1u);
  EXPECT_EQ(table[child].parent, root);
  EXPECT_EQ(table[child].scope, 7);
  EXPECT_EQ(table.live(), 2u);

  EXPECT_EQ(table.FreeBlock(child), root);
  EXPECT_EQ(table[root].children, 0u);
  EXPECT_EQ(table.Find(Key(2)), kNil);
  EXPECT_EQ(table.live(), 1u);
}

TEST(BlockTableTest, AReusedBlockCarriesItsRetentionSequenceOn) {
  BlockTable table(16);
  const uint32_t b = table.NewBlock(Key(1), kNil, 0);
  table[b].retention_seq = 41;
  table[b].priority = 90;
  (void)table.FreeBlock(b);
  const uint32_t again = table.NewBlock(Key(9), kNil, 0);
  ASSERT_EQ(again, b);                        // the free list gives the slot back
  EXPECT_EQ(table[again].retention_seq, 42);  // a deadline of the old block cannot match
  EXPECT_EQ(table[again].priority, kDefaultPriority);
  EXPECT_EQ(table.Find(Key(9)), again);
}

TEST(BlockTableTest, SlotsChainFromTheInlineOneAndFreeInAnyOrder) {
  BlockTable table(16);
  const uint32_t b = table.NewBlock(Key(1), kNil, 0);
  const uint32_t first = table.NewSlot(b, PackLocation(0, 0, 0));
  const uint32_t second = table.NewSlot(b, PackLocation(1, 0, 0));
  const uint32_t absent = table.NewSlot(b, PackLocation(2, 1, 3) | kAbsentBit);
  EXPECT_EQ(first, b);  // the inline slot first
  EXPECT_NE(second & kOverflowRef, 0u);
  EXPECT_EQ(table.Owner(second), b);
  EXPECT_EQ(table.Owner(absent), b);
  EXPECT_EQ(table.FindSlot(b, PackLocation(2, 1, 3)), absent);
  EXPECT_EQ(table.FindHeldSlot(b, PackLocation(2, 1, 3)), kNil);  // absent: no location
  EXPECT_EQ(HeldSlots(table, b).size(), 2u);

  table.FreeSlot(second);  // from the middle of the chain
  EXPECT_EQ(table.FindSlot(b, PackLocation(1, 0, 0)), kNil);
  EXPECT_EQ(table.FindSlot(b, PackLocation(2, 1, 3)), absent);
  const uint32_t reused = table.NewSlot(b, PackLocation(3, 0, 0));
  EXPECT_EQ(reused, second);  // the overflow free list
  table.FreeSlot(first);
  EXPECT_EQ(HeldSlots(table, b), std::vector<uint32_t>{reused});
  EXPECT_TRUE(table.HasLocation(b));
  table.FreeSlot(reused);
  EXPECT_FALSE(table.HasLocation(b));
}

TEST(BlockTableTest, WideCountsGoAsideAndComeBack) {
  BlockTable table(16);
  const uint32_t b = table.NewBlock(Key(1), kNil, 0);
  const uint32_t ref = table.NewSlot(b, PackLocation(0, 0, 0));
  EXPECT_EQ(table.AddChildrenHere(ref, 70000), 70000u);
  EXPECT_EQ(table.ChildrenHere(ref), 70000u);
  EXPECT_EQ(table.AddChildrenHere(ref, -69999), 1u);
  EXPECT_EQ(table.Slot(ref).children_here, 1);
  EXPECT_EQ(table.AddWindowLeaves(ref, 3), 3u);
  EXPECT_EQ(table.WindowLeaves(ref), 3u);
}

TEST(LruListsTest, ListsArePerNodeTierAndPriorityLeastRecentFirst) {
  BlockTable table(16);
  LruLists lists;
  std::vector<uint32_t> refs;
  for (uint64_t i = 0; i < 3; ++i) {
    const uint32_t b = table.NewBlock(Key(i + 1), kNil, 0);
    table[b].priority = i == 2 ? 80 : 35;
    const uint32_t packed = PackLocation(5, 1, 0);
    refs.push_back(table.NewSlot(b, packed));
    lists.CountHeld(packed, +1);
    lists.LinkTail(table, refs.back());
  }
  EXPECT_EQ(lists.Held(5, 1), 3u);
  EXPECT_EQ(lists.Held(5, 0), 0u);
  EXPECT_EQ(lists.Held(4, 1), 0u);
  EXPECT_FALSE(lists.Empty(5));
  EXPECT_TRUE(lists.Empty(4));
  EXPECT_EQ(lists.List(5, 1, 35).head, refs[0]);
  EXPECT_EQ(lists.List(5, 1, 35).tail, refs[1]);
  EXPECT_EQ(lists.List(5, 1, 80).head, refs[2]);

  lists.MoveToTail(table, refs[0]);
  EXPECT_EQ(lists.List(5, 1, 35).head, refs[1]);
  EXPECT_EQ(lists.List(5, 1, 35).tail, refs[0]);
  EXPECT_EQ(table.Slot(refs[1]).lru_next, refs[0]);

  lists.Unlink(table, refs[1]);
  lists.CountHeld(table.Slot(refs[1]).packed, -1);
  EXPECT_EQ(lists.List(5, 1, 35).head, refs[0]);
  EXPECT_EQ(table.Slot(refs[0]).lru_prev, kNil);
  EXPECT_EQ(lists.Held(5, 1), 2u);
}

TEST(PoolWindowsTest, UndeclaredPlacesAreFullAttention) {
  PoolWindows windows;
  EXPECT_FALSE(windows.any());
  EXPECT_EQ(windows.At(PackLocation(1, 0, 0)), nullptr);
  windows.Set(1, {{PackLocation(1, 0, 2), PoolWindow{16, 1}}});
  EXPECT_TRUE(windows.Any(1));
  EXPECT_FALSE(windows.Any(0));
  ASSERT_NE(windows.At(PackLocation(1, 0, 2)), nullptr);
  EXPECT_EQ(windows.At(PackLocation(1, 0, 2))->window_blocks, 16u);
  EXPECT_EQ(windows.At(PackLocation(1, 0, 0)), nullptr);
  windows.Set(1, {});
  EXPECT_FALSE(windows.any());
}

}  // namespace
}  // namespace kvtier::coordinator::internal
