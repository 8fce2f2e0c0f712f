#include "services/cli/node_events.h"

#include <gtest/gtest.h>

namespace kvtier::cli {
namespace {

using coordinator::KvEvent;

TEST(NodeEventsTest, WorkerEventsMapToThePrimaryTier) {
  const BlockKey key{1, 2}, parent{1, 1};
  const worker::WorkerEvent stored{worker::WorkerEvent::Kind::kStored,
                                   7,
                                   3,
                                   key,
                                   parent,
                                   false,
                                   60,
                                   0xABC,
                                   std::chrono::seconds(30)};  // priority 60 for 30 s
  const KvEvent s = ToKvEvent(stored, /*scope=*/4);
  EXPECT_EQ(s.kind, KvEvent::Kind::kStored);
  EXPECT_EQ(s.tier, Tier::kGpu);
  EXPECT_EQ(s.pool, 3);
  EXPECT_EQ(s.scope, 4);
  EXPECT_EQ(s.parent, parent);
  ASSERT_EQ(s.retention.size(), 1u);
  EXPECT_EQ(s.retention[0].priority, 60);
  EXPECT_EQ(s.retention[0].duration, std::chrono::seconds(30))
      << "the coordinator reverts it after 30 s too";
  // Offloaded: gone from the pool; the store reports the block's new place itself.
  const worker::WorkerEvent offloaded{
      worker::WorkerEvent::Kind::kOffloaded, 8, 3, key, {}, false, 60, 0xABC};
  const KvEvent o = ToKvEvent(offloaded, 4);
  EXPECT_EQ(o.kind, KvEvent::Kind::kRemoved);
  EXPECT_EQ(o.keys, std::vector<BlockKey>{key});
  // A chain's first block names no parent: the coordinator starts it at the scope's root.
  const worker::WorkerEvent first{
      worker::WorkerEvent::Kind::kStored, 9, 0, key, BlockKey{9, 9}, true, 35, 0xABC};
  EXPECT_FALSE(ToKvEvent(first, 4).parent.has_value());
}

TEST(NodeEventsTest, StoreEventsKeepTierAndRetention) {
  storage::BlockHeader header;
  header.key = BlockKey{5, 5};
  header.parent = BlockKey{5, 4};
  header.priority = 80;
  header.retention_left_ms = 1500;
  const KvEvent stored =
      ToKvEvent({storage::StoreEvent::Kind::kStored, kvtier::Tier::kHost, header}, 2);
  EXPECT_EQ(stored.kind, KvEvent::Kind::kStored);
  EXPECT_EQ(stored.tier, Tier::kHost);
  EXPECT_EQ(stored.parent, header.parent);
  ASSERT_EQ(stored.retention.size(), 1u);
  EXPECT_EQ(stored.retention[0].priority, 80);
  EXPECT_EQ(stored.retention[0].duration, std::chrono::milliseconds(1500));
  // A demotion's second half: the block leaves the host tier.
  const KvEvent removed =
      ToKvEvent({storage::StoreEvent::Kind::kRemoved, kvtier::Tier::kHost, header}, 2);
  EXPECT_EQ(removed.kind, KvEvent::Kind::kRemoved);
  EXPECT_EQ(removed.tier, Tier::kHost);
  EXPECT_EQ(removed.keys, std::vector<BlockKey>{header.key});
  const coordinator::SnapshotBlock block = ToSnapshotBlock(kvtier::Tier::kDisk, header, 2);
  EXPECT_EQ(block.tier, Tier::kDisk);
  EXPECT_EQ(block.parent, header.parent);
  EXPECT_EQ(block.retention.priority, 80);
  header.first_in_chain = true;
  EXPECT_FALSE(ToSnapshotBlock(kvtier::Tier::kDisk, header, 2).parent.has_value());
}

}  // namespace
}  // namespace kvtier::cli
