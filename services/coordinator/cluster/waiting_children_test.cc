// WaitingChildren on its own: what waits, for how long, and what a node's later word or
// a lack of room takes out.
#include "services/coordinator/cluster/waiting_children.h"

#include <gtest/gtest.h>

namespace kvtier::coordinator {
namespace {

using std::chrono::milliseconds;

BlockKey Key(uint64_t i) { return OpaqueKeyNamespace("test", "").Key(i); }

KvEvent StoredUnder(BlockKey parent, std::vector<BlockKey> keys) {
  KvEvent e;
  e.kind = KvEvent::Kind::kStored;
  e.parent = parent;
  e.keys = std::move(keys);
  e.tier = Tier::kHost;
  return e;
}

// A later event of `keys`: a removal, or a move out of `tier` to the disk.
KvEvent Later(KvEvent::Kind kind, std::vector<BlockKey> keys, Tier tier = Tier::kHost) {
  KvEvent e;
  e.kind = kind;
  e.keys = std::move(keys);
  e.tier = tier;
  e.to_tier = Tier::kDisk;
  return e;
}

std::vector<BlockKey> KeysOf(const std::vector<ParkedEvent>& parked) {
  std::vector<BlockKey> keys;
  for (const ParkedEvent& p : parked)
    keys.insert(keys.end(), p.event.keys.begin(), p.event.keys.end());
  return keys;
}

TEST(WaitingChildrenTest, ChildrenAreTakenByTheirParentOldestFirst) {
  WaitingChildren waiting({.wait = milliseconds(100), .max_blocks = 8});
  // Blocks 1 and 3 wait for 0 (node 7, then node 8); block 5 waits for 4.
  EXPECT_EQ(waiting.Park(7, StoredUnder(Key(0), {Key(1)}), milliseconds(0)), 0u);
  EXPECT_EQ(waiting.Park(9, StoredUnder(Key(4), {Key(5)}), milliseconds(1)), 0u);
  EXPECT_EQ(waiting.Park(8, StoredUnder(Key(0), {Key(3)}), milliseconds(2)), 0u);
  EXPECT_EQ(waiting.blocks(), 3u);
  const std::vector<ParkedEvent> children = waiting.TakeChildren(Key(0));
  ASSERT_EQ(children.size(), 2u);
  EXPECT_EQ(children[0].node, 7u);
  EXPECT_EQ(children[1].node, 8u);
  EXPECT_EQ(KeysOf(children), (std::vector<BlockKey>{Key(1), Key(3)}));
  EXPECT_TRUE(waiting.TakeChildren(Key(0)).empty()) << "taken once";
  EXPECT_EQ(waiting.blocks(), 1u);
  EXPECT_EQ(KeysOf(waiting.TakeChildren(Key(4))), std::vector<BlockKey>{Key(5)});
  EXPECT_TRUE(waiting.empty());
}

TEST(WaitingChildrenTest, AnEventGivesUpWhenItsWaitHasPassed) {
  WaitingChildren waiting({.wait = milliseconds(100), .max_blocks = 8});
  EXPECT_EQ(waiting.Park(1, StoredUnder(Key(0), {Key(1), Key(2)}), milliseconds(0)), 0u);
  EXPECT_EQ(waiting.Park(1, StoredUnder(Key(10), {Key(11)}), milliseconds(50)), 0u);
  EXPECT_EQ(waiting.Expire(milliseconds(99)), 0u) << "both still within their wait";
  EXPECT_EQ(waiting.Expire(milliseconds(100)), 2u)
      << "the chain of two, parked at 0, gives up at 100";
  EXPECT_TRUE(waiting.TakeChildren(Key(0)).empty());
  EXPECT_EQ(waiting.blocks(), 1u);
  EXPECT_EQ(waiting.Expire(milliseconds(150)), 1u);
  EXPECT_TRUE(waiting.empty());
}

TEST(WaitingChildrenTest, OnlyTheParkingNodesLaterWordOnABlockInItsPlaceDropsIt) {
  WaitingChildren waiting({.wait = milliseconds(100), .max_blocks = 8});
  // Host copies: blocks 1 and 2 of node 1, block 2 of node 2, all waiting for block 0.
  EXPECT_EQ(waiting.Park(1, StoredUnder(Key(0), {Key(1), Key(2)}), milliseconds(0)), 0u);
  EXPECT_EQ(waiting.Park(2, StoredUnder(Key(0), {Key(2)}), milliseconds(0)), 0u);
  // Node 3 removes block 2: not its event. Node 1 removes its disk copy: another place.
  EXPECT_EQ(waiting.Touch(3, Later(KvEvent::Kind::kRemoved, {Key(2)})), 0u);
  EXPECT_EQ(waiting.Touch(1, Later(KvEvent::Kind::kRemoved, {Key(2)}, Tier::kDisk)), 0u);
  EXPECT_EQ(waiting.blocks(), 3u) << "nothing dropped";
  // Node 1 removes block 2 from the host: its chain is dropped whole, at no loss.
  EXPECT_EQ(waiting.Touch(1, Later(KvEvent::Kind::kRemoved, {Key(2)})), 0u);
  EXPECT_EQ(waiting.blocks(), 1u);
  // Node 2 moves its block 2 to disk: dropped, and held there unindexed (an orphan).
  EXPECT_EQ(waiting.Touch(2, Later(KvEvent::Kind::kTierChanged, {Key(2)})), 1u);
  EXPECT_TRUE(waiting.empty());
}

TEST(WaitingChildrenTest, ANodeThatLeavesTakesItsEventsWithIt) {
  WaitingChildren waiting({.wait = milliseconds(100), .max_blocks = 8});
  EXPECT_EQ(waiting.Park(1, StoredUnder(Key(0), {Key(1)}), milliseconds(0)), 0u);
  EXPECT_EQ(waiting.Park(2, StoredUnder(Key(0), {Key(2)}), milliseconds(0)), 0u);
  waiting.DropNode(1);
  EXPECT_EQ(waiting.blocks(), 1u);
  EXPECT_EQ(KeysOf(waiting.TakeChildren(Key(0))), std::vector<BlockKey>{Key(2)});
}

TEST(WaitingChildrenTest, TheOldestGiveUpToMakeRoom) {
  WaitingChildren waiting({.wait = milliseconds(100), .max_blocks = 3});
  EXPECT_EQ(waiting.Park(1, StoredUnder(Key(0), {Key(1), Key(2)}), milliseconds(0)), 0u);
  EXPECT_EQ(waiting.Park(1, StoredUnder(Key(10), {Key(11)}), milliseconds(1)), 0u);
  // Full (3 blocks). Two more: the oldest event (two blocks) gives up, the next stays.
  EXPECT_EQ(waiting.Park(1, StoredUnder(Key(20), {Key(21), Key(22)}), milliseconds(2)), 2u);
  EXPECT_TRUE(waiting.TakeChildren(Key(0)).empty());
  EXPECT_EQ(waiting.blocks(), 3u);
  // An event larger than all the room is given up itself; nothing else moves.
  EXPECT_EQ(
      waiting.Park(1, StoredUnder(Key(30), {Key(31), Key(32), Key(33), Key(34)}), milliseconds(3)),
      4u);
  EXPECT_EQ(waiting.blocks(), 3u);
  // One block more than the room: the oldest left (block 11) gives up for it.
  EXPECT_EQ(waiting.Park(1, StoredUnder(Key(40), {Key(41)}), milliseconds(4)), 1u);
  EXPECT_TRUE(waiting.TakeChildren(Key(10)).empty());
  EXPECT_EQ(KeysOf(waiting.TakeChildren(Key(20))), (std::vector<BlockKey>{Key(21), Key(22)}));
  EXPECT_EQ(KeysOf(waiting.TakeChildren(Key(40))), std::vector<BlockKey>{Key(41)});
}

TEST(WaitingChildrenTest, TakenAndDroppedEventsLeaveNothingForTheClockToExpire) {
  WaitingChildren waiting({.wait = milliseconds(100), .max_blocks = 8});
  EXPECT_EQ(waiting.Park(1, StoredUnder(Key(0), {Key(1)}), milliseconds(0)), 0u);
  EXPECT_EQ(waiting.Park(1, StoredUnder(Key(5), {Key(6)}), milliseconds(0)), 0u);
  EXPECT_EQ(waiting.TakeChildren(Key(0)).size(), 1u);
  EXPECT_EQ(waiting.Touch(1, Later(KvEvent::Kind::kTierChanged, {Key(6)})), 1u);
  EXPECT_EQ(waiting.Expire(milliseconds(1000)), 0u) << "nothing is counted twice";
  EXPECT_TRUE(waiting.empty());
}

}  // namespace
}  // namespace kvtier::coordinator
