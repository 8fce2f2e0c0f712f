#include "storage/tier_index.h"

#include <gtest/gtest.h>

#include "storage/testing/blocks.h"

namespace kvtier::storage {
namespace {

using namespace std::chrono_literals;
using testing::MakeBlock;
using testing::TestBlock;

TEST(TierIndexTest, FindsByFormatAndKeyOnly) {
  FakeClock clock;
  TierIndex index(&clock);
  auto block = MakeBlock(1, 64);
  const uint32_t id = index.Insert(block.header, 64, 0);
  EXPECT_EQ(index.Find(block.header.key, block.header.format_tag), id);
  // Same key, another layout: a different block.
  EXPECT_EQ(index.Find(block.header.key, "other-model|L1/H1/D8/T16/fp16/W0/S0|none"),
            TierIndex::kNil);
  EXPECT_EQ(index.units(), 64u);
  index.Erase(id);
  EXPECT_EQ(index.Find(block.header.key, block.header.format_tag), TierIndex::kNil);
  EXPECT_EQ(index.units(), 0u);
}

TEST(TierIndexTest, VictimsFollowPriorityThenRecency) {
  FakeClock clock;
  TierIndex index(&clock);
  // Blocks 0 (p50), 1 (p10), 2 (p50) stored in that order; then block 0 is read again.
  const uint32_t b0 = index.Insert(MakeBlock(0, 8, 50).header, 8, 0);
  const uint32_t b1 = index.Insert(MakeBlock(1, 8, 10).header, 8, 0);
  const uint32_t b2 = index.Insert(MakeBlock(2, 8, 50).header, 8, 0);
  index.Touch(b0);
  EXPECT_EQ(index.Victim(), b1);
  index.Erase(b1);
  EXPECT_EQ(index.Victim(), b2);
  index.Erase(b2);
  EXPECT_EQ(index.Victim(), b0);
}

TEST(TierIndexTest, VictimsForTakesTheFewestThatReachTheUnitsAndRemovesNone) {
  FakeClock clock;
  TierIndex index(&clock);
  const uint32_t b0 = index.Insert(MakeBlock(0, 8, 50).header, 8, 0);
  const uint32_t b1 = index.Insert(MakeBlock(1, 4, 10).header, 4, 0);
  const uint32_t b2 = index.Insert(MakeBlock(2, 8, 50).header, 8, 0);
  EXPECT_EQ(index.VictimsFor(4), (std::vector<uint32_t>{b1}));
  EXPECT_EQ(index.VictimsFor(5), (std::vector<uint32_t>{b1, b0}));
  EXPECT_EQ(index.VictimsFor(100), (std::vector<uint32_t>{b1, b0, b2}));
  EXPECT_TRUE(index.VictimsFor(0).empty());
  EXPECT_EQ(index.Victim(), b1) << "nothing was taken out";
}

TEST(TierIndexTest, RestoredVictimsGetTheirOldPlacesBack) {
  FakeClock clock;
  TierIndex index(&clock);
  // Blocks 0, 1, 2 (p20) and 3 (p50), stored in that order.
  std::vector<TestBlock> blocks;
  for (auto [id, priority] : {std::pair{0, 20}, {1, 20}, {2, 20}, {3, 50}}) {
    blocks.push_back(MakeBlock(id, 8, static_cast<uint8_t>(priority)));
    index.Insert(blocks.back().header, 8, 100 + id);
  }
  // An eviction takes 0 and 1 out; its write fails, so they come back, last one first.
  for (int i = 0; i < 2; ++i) index.Erase(index.Victim());
  EXPECT_EQ(index.units(), 16u);
  index.Restore(blocks[1].header, 8, 101);
  index.Restore(blocks[0].header, 8, 100);
  EXPECT_EQ(index.units(), 32u);
  const uint32_t b0 = index.Find(blocks[0].header.key, blocks[0].header.format_tag);
  ASSERT_NE(b0, TierIndex::kNil);
  EXPECT_EQ(index.entry(b0).location, 100u);
  // The order is as before the eviction: 0, 1, 2, then 3.
  std::vector<uint64_t> order;
  for (uint32_t id; (id = index.Victim()) != TierIndex::kNil; index.Erase(id)) {
    order.push_back(index.entry(id).header.key.lo);
  }
  EXPECT_EQ(order, (std::vector<uint64_t>{0, 1, 2, 3}));
}

TEST(TierIndexTest, AHeldEntryStaysFindableButIsNoVictimAgain) {
  FakeClock clock;
  TierIndex index(&clock);
  // Blocks 0 (p10) and 1 (p50); 0 is being evicted (held) while it is read and re-put.
  const TestBlock b0 = MakeBlock(0, 8, 10);
  const uint32_t held = index.Insert(b0.header, 8, 0);
  const uint32_t b1 = index.Insert(MakeBlock(1, 8, 50).header, 8, 0);
  ASSERT_EQ(index.Victim(), held);
  index.Hold(held);
  index.Touch(held);
  index.Refresh(held, MakeBlock(0, 8, 5).header);
  EXPECT_EQ(index.Find(b0.header.key, b0.header.format_tag), held);
  EXPECT_EQ(index.Victim(), b1);  // not the held one, though its priority is lower
  // Once erased, its id is reused by a block that is in the eviction order again.
  index.Erase(held);
  const uint32_t b2 = index.Insert(MakeBlock(2, 8, 0).header, 8, 0);
  EXPECT_EQ(b2, held);
  EXPECT_EQ(index.Victim(), b2);
}

TEST(TierIndexTest, RetentionRunsOutAndPriorityRevertsToDefault) {
  FakeClock clock;
  TierIndex index(&clock);
  auto kept = MakeBlock(0, 8, 90);
  kept.header.retention_left_ms = 1000;  // priority 90 for one second
  const uint32_t high = index.Insert(kept.header, 8, 0);
  const uint32_t normal = index.Insert(MakeBlock(1, 8, 60).header, 8, 0);
  EXPECT_EQ(index.Victim(), normal);
  clock.Advance(400ms);
  EXPECT_EQ(index.CurrentHeader(high).retention_left_ms, 600u);
  clock.Advance(600ms);
  // Retention over: block 0 is back at 35 and goes before block 1 (60).
  EXPECT_EQ(index.Victim(), high);
  EXPECT_EQ(index.EffectivePriority(high), kDefaultPriority);
  EXPECT_EQ(index.CurrentHeader(high).priority, kDefaultPriority);
  EXPECT_EQ(index.CurrentHeader(high).retention_left_ms, 0u);
}

TEST(TierIndexTest, RefreshReplacesAnEarlierDeadline) {
  FakeClock clock;
  TierIndex index(&clock);
  auto block = MakeBlock(0, 8, 90);
  block.header.retention_left_ms = 100;
  const uint32_t id = index.Insert(block.header, 8, 0);
  const uint32_t other = index.Insert(MakeBlock(1, 8, 50).header, 8, 0);
  block.header.retention_left_ms = 0;  // the block is stored again with a lasting priority 90
  index.Refresh(id, block.header);
  clock.Advance(1s);
  EXPECT_EQ(index.Victim(), other);  // the old 100 ms deadline no longer applies
  EXPECT_EQ(index.EffectivePriority(id), 90);
}

}  // namespace
}  // namespace kvtier::storage
