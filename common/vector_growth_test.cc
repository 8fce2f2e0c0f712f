#include "common/vector_growth.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace kvtier {
namespace {

// A batch of 100 appended after GrowFor lands where the vector's storage already was.
TEST(GrowForTest, ABatchAppendedAfterItAllocatesNothing) {
  std::vector<uint64_t> v = {1, 2, 3};
  GrowFor(v, 100);
  const uint64_t* storage = v.data();
  for (uint64_t i = 0; i < 100; ++i) v.push_back(i);
  EXPECT_EQ(v.data(), storage);
  EXPECT_EQ(v.size(), 103u);
  EXPECT_EQ(v[3], 0u);
}

// Room there already: nothing moves. None: at least twice the capacity, so that a vector
// fed batch after batch (a node's events between ticks) moves its elements log2(n)
// times, not once a batch.
TEST(GrowForTest, ItKeepsTheVectorsGeometricGrowth) {
  std::vector<uint64_t> v;
  v.reserve(64);
  v.assign(10, 7);
  GrowFor(v, 50);
  EXPECT_EQ(v.capacity(), 64u) << "room for 60 of 64: nothing reserved";
  v.resize(64);
  GrowFor(v, 1);
  EXPECT_GE(v.capacity(), 128u);
  GrowFor(v, 500);
  EXPECT_GE(v.capacity(), 564u);
}

}  // namespace
}  // namespace kvtier
