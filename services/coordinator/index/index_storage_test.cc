// SlotCounts (index_storage.h) against std::map: random adds and subtracts over a small
// key range keep probe runs long and make backward-shift deletion wrap and collide.
#include "services/coordinator/index/index_storage.h"

#include <map>
#include <random>

#include <gtest/gtest.h>

namespace kvtier::coordinator::internal {
namespace {

TEST(SlotCountsTest, MatchesAMapThroughRandomAddsAndSubtracts) {
  std::mt19937 rng(7);
  SlotCounts counts;
  std::map<uint32_t, uint32_t> model;
  for (int step = 0; step < 200000; ++step) {
    // Keys from a narrow range, half of them overflow references (the top bit set).
    const uint32_t key = (rng() % 600) | (rng() % 2 ? kOverflowRef : 0);
    const auto it = model.find(key);
    if (it != model.end() && rng() % 2) {
      const uint32_t n = 1 + rng() % it->second;
      const uint32_t left = it->second - n;
      ASSERT_EQ(counts.Subtract(key, n), left) << "step " << step;
      if (left == 0) model.erase(it);
      else it->second = left;
    } else {
      const uint32_t n = 1 + rng() % 3;
      counts.Add(key, n);
      model[key] += n;
    }
    ASSERT_EQ(counts.size(), model.size());
    if (step % 1000 == 0) {
      for (uint32_t k = 0; k < 600; ++k) {
        ASSERT_EQ(counts.Contains(k), model.contains(k)) << k;
        ASSERT_EQ(counts.Contains(k | kOverflowRef), model.contains(k | kOverflowRef)) << k;
      }
    }
  }
  EXPECT_LE(counts.memory_bytes(), 2 * 1200 * 8 * 5 / 4 + 16 * 8) << "8 bytes per entry at load 0.8, grown by half";
}

TEST(SlotCountsTest, AnEmptyTableHoldsNothing) {
  SlotCounts counts;
  EXPECT_FALSE(counts.Contains(0));
  EXPECT_EQ(counts.size(), 0u);
  EXPECT_EQ(counts.memory_bytes(), 0u);
  counts.Add(5, 2);
  EXPECT_TRUE(counts.Contains(5));
  EXPECT_EQ(counts.Subtract(5, 2), 0u);
  EXPECT_FALSE(counts.Contains(5));
}

}  // namespace
}  // namespace kvtier::coordinator::internal
