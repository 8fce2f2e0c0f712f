#include "storage/tier_index.h"

#include <gtest/gtest.h>

#include "storage/testing/blocks.h"

namespace kvtier::storage {
namespace {

using namespace std::chrono_literals;
using testing::MakeBlock;

TEST(TierIndexTest, FindsByFormatAndKeyOnly) {
  FakeClock clock;
  TierIndex index(&clock);
  auto block = MakeBlock(1, 64);
  const uint32_t id = index.Insert(block.header, 64, 0);
  EXPECT_EQ(index.Find(block.header.key, block.header.format_tag), id);
  // Same key, another layout: a different block.
  EXPECT_EQ(index.Find(block.header.key, "other-model|L1/H1/D8/T16/fp16/W0/S0|none"), TierIndex::kNil);
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
