#include "common/prioritized_lru.h"

#include <gtest/gtest.h>

namespace kvtier {
namespace {

std::vector<uint32_t> DrainOrder(PrioritizedLru& lru) {
  std::vector<uint32_t> order;
  for (uint32_t id; (id = lru.FindVictim([](uint32_t) { return true; })) != PrioritizedLru::kNil;) {
    order.push_back(id);
    lru.Remove(id);
  }
  return order;
}

TEST(PrioritizedLruTest, LowestPriorityFirstThenLeastRecent) {
  PrioritizedLru lru(8);
  // Released in this order: 0 (p50), 1 (p10), 2 (p50), 3 (p100), 4 (p10), 5 (p0).
  lru.PushMostRecent(0, 50);
  lru.PushMostRecent(1, 10);
  lru.PushMostRecent(2, 50);
  lru.PushMostRecent(3, 100);
  lru.PushMostRecent(4, 10);
  lru.PushMostRecent(5, 0);
  EXPECT_EQ(lru.size(), 6u);
  EXPECT_EQ(DrainOrder(lru), (std::vector<uint32_t>{5, 1, 4, 0, 2, 3}));
  EXPECT_EQ(lru.size(), 0u);
}

TEST(PrioritizedLruTest, TouchMovesToMostRecentWithinItsPriority) {
  PrioritizedLru lru(4);
  lru.PushMostRecent(0, 35);
  lru.PushMostRecent(1, 35);
  lru.PushMostRecent(2, 35);
  // Block 0 is used again: remove and push back makes it the newest of priority 35.
  lru.Remove(0);
  lru.PushMostRecent(0, 35);
  EXPECT_EQ(DrainOrder(lru), (std::vector<uint32_t>{1, 2, 0}));
}

TEST(PrioritizedLruTest, PushLeastRecentPutsAnIdFirstInItsPriority) {
  PrioritizedLru lru(4);
  lru.PushMostRecent(0, 35);
  lru.PushMostRecent(1, 10);
  // 2 and 3 come back at the old end: pushed 3 then 2, they leave 2, 3 before 0.
  lru.PushLeastRecent(3, 35);
  lru.PushLeastRecent(2, 35);
  EXPECT_EQ(lru.size(), 4u);
  EXPECT_EQ(DrainOrder(lru), (std::vector<uint32_t>{1, 2, 3, 0}));
  lru.PushLeastRecent(0, 99);  // an empty list
  EXPECT_EQ(DrainOrder(lru), (std::vector<uint32_t>{0}));
}

TEST(PrioritizedLruTest, VictimSkipsIneligibleIds) {
  PrioritizedLru lru(4);
  lru.PushMostRecent(0, 1);
  lru.PushMostRecent(1, 2);
  EXPECT_EQ(lru.FindVictim([](uint32_t id) { return id != 0; }), 1u);
  EXPECT_EQ(lru.FindVictim([](uint32_t) { return false; }), PrioritizedLru::kNil);
}

TEST(PrioritizedLruTest, GrowKeepsLinkedIds) {
  PrioritizedLru lru(2);
  lru.PushMostRecent(1, 64);  // priority 64 lives in the second mask word
  lru.Grow(100);
  EXPECT_EQ(lru.capacity(), 100u);
  lru.PushMostRecent(99, 64);
  lru.PushMostRecent(50, 63);
  EXPECT_TRUE(lru.Contains(1));
  EXPECT_EQ(lru.priority(99), 64);
  EXPECT_EQ(DrainOrder(lru), (std::vector<uint32_t>{50, 1, 99}));
}

}  // namespace
}  // namespace kvtier
