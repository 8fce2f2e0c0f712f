#include "services/coordinator/cluster/parent_lookahead.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvtier::coordinator {
namespace {

const BlockKey kA{1, 1}, kB{1, 2}, kX{9, 9};

KvEvent Stored(BlockKey key, std::optional<BlockKey> parent = std::nullopt) {
  KvEvent e;
  e.kind = KvEvent::Kind::kStored;
  e.keys = {key};
  e.parent = parent;
  return e;
}
KvEvent Other(KvEvent::Kind kind, std::vector<BlockKey> keys) {
  KvEvent e;
  e.kind = kind;
  e.keys = std::move(keys);
  return e;
}

// b (child of a) comes first; a's store is two events later, past an event of x.
TEST(ParentLookaheadTest, FindsTheLaterStoreOfTheParent) {
  const std::vector<KvEvent> events{Stored(kB, kA), Other(KvEvent::Kind::kRemoved, {kX}),
                                    Stored(kA)};
  EXPECT_EQ(LaterParentStore(events, 0, 0), 2u);
  EXPECT_EQ(LaterParentStore(events, 0, 0, /*window=*/1), std::nullopt) << "a lies past the window";
  EXPECT_EQ(LaterParentStore(events, 0, 2), std::nullopt) << "nothing stores a after event 2";
}

// b never moves past an event of its own block, nor past a cleared event.
TEST(ParentLookaheadTest, StopsAtAnEventOfTheBlockOrAClear) {
  const std::vector<KvEvent> removed{Stored(kB, kA), Other(KvEvent::Kind::kRemoved, {kB}),
                                     Stored(kA)};
  EXPECT_EQ(LaterParentStore(removed, 0, 0), std::nullopt);
  const std::vector<KvEvent> moved{Stored(kB, kA), Other(KvEvent::Kind::kTierChanged, {kB}),
                                   Stored(kA)};
  EXPECT_EQ(LaterParentStore(moved, 0, 0), std::nullopt);
  const std::vector<KvEvent> cleared{Stored(kB, kA), Other(KvEvent::Kind::kCleared, {}),
                                     Stored(kA)};
  EXPECT_EQ(LaterParentStore(cleared, 0, 0), std::nullopt);
}

// Only events of b in b's own place (tier and pool) stop it: the removal of a host copy
// does not stop b's store to disk, but a move of b to disk, or a store of it there, does.
TEST(ParentLookaheadTest, EventsOfTheBlockElsewhereDoNotStopIt) {
  KvEvent to_disk = Stored(kB, kA);
  to_disk.tier = Tier::kDisk;
  KvEvent host_removal = Other(KvEvent::Kind::kRemoved, {kB});
  host_removal.tier = Tier::kHost;
  const std::vector<KvEvent> demoted{to_disk, host_removal, Stored(kA)};
  EXPECT_EQ(LaterParentStore(demoted, 0, 0), 2u);
  KvEvent other_pool = host_removal;
  other_pool.tier = Tier::kDisk;
  other_pool.pool = 1;
  EXPECT_EQ(LaterParentStore(std::vector<KvEvent>{to_disk, other_pool, Stored(kA)}, 0, 0), 2u)
      << "another pool";

  KvEvent moved_in = Other(KvEvent::Kind::kTierChanged, {kB});
  moved_in.tier = Tier::kHost;
  moved_in.to_tier = Tier::kDisk;
  EXPECT_EQ(LaterParentStore(std::vector<KvEvent>{to_disk, moved_in, Stored(kA)}, 0, 0),
            std::nullopt);
  KvEvent stored_again = to_disk;
  stored_again.parent = std::nullopt;
  EXPECT_EQ(LaterParentStore(std::vector<KvEvent>{to_disk, stored_again, Stored(kA)}, 0, 0),
            std::nullopt);
  // Dropping b for a removal or a store again loses nothing; for a move it leaves b
  // held where the index does not know it.
  EXPECT_FALSE(LeavesBlocksUnindexed(Other(KvEvent::Kind::kRemoved, {kB}), Stored(kB, kA)));
  EXPECT_TRUE(LeavesBlocksUnindexed(Other(KvEvent::Kind::kTierChanged, {kB}), Stored(kB, kA)));
  EXPECT_FALSE(LeavesBlocksUnindexed(moved_in, to_disk)) << "moved into b's place, not out of it";
}

// A chain event that holds the parent among its keys brings it in.
TEST(ParentLookaheadTest, AChainHoldingTheParentBringsItIn) {
  KvEvent chain = Stored(kX);
  chain.keys = {kX, kA};
  const std::vector<KvEvent> events{Stored(kB, kA), chain};
  EXPECT_EQ(LaterParentStore(events, 0, 0), 1u);
}

}  // namespace
}  // namespace kvtier::coordinator
