#include "services/store/stream/staging_pool.h"

#include <gtest/gtest.h>

namespace kvtier::store {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

TEST(StagingPoolTest, BuffersAreReusedAfterRelease) {
  StagingPool pool(8 * kMiB);
  const uint8_t* first = nullptr;
  {
    StagingBuffer buffer = pool.Take(3 * kMiB).value();
    first = buffer.bytes().data();
    EXPECT_EQ(buffer.size(), 3 * kMiB);
    EXPECT_EQ(pool.in_use_bytes(), 3 * kMiB);
  }
  EXPECT_EQ(pool.in_use_bytes(), 0u);
  // A transfer of a slightly smaller size gets the same memory back: nothing allocated.
  StagingBuffer again = pool.Take(2 * kMiB + 1).value();
  EXPECT_EQ(again.bytes().data(), first);
  EXPECT_EQ(again.size(), 2 * kMiB + 1);
}

TEST(StagingPoolTest, TakingBeyondTheBoundIsRefusedUntilBuffersComeBack) {
  StagingPool pool(4 * kMiB);
  StagingBuffer a = pool.Take(3 * kMiB).value();
  EXPECT_EQ(pool.Take(2 * kMiB).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(pool.Take(5 * kMiB).status().code(), StatusCode::kInvalidArgument) << "never fits";
  a = StagingBuffer();  // released
  EXPECT_TRUE(pool.Take(2 * kMiB).ok());
}

TEST(StagingPoolTest, ACachedBufferServesOnlyTakesItDoesNotDwarf) {
  StagingPool pool(4 * kMiB);
  { StagingBuffer big = pool.Take(3 * kMiB).value(); }  // 3 MiB cached
  // Too big for a 1 MiB take (it would hold 3 MiB of the bound): a fresh 1 MiB buffer.
  StagingBuffer one = pool.Take(kMiB).value();
  EXPECT_EQ(pool.in_use_bytes(), kMiB);
  // The cached 3 MiB serves a 2 MiB take.
  StagingBuffer two = pool.Take(2 * kMiB).value();
  EXPECT_EQ(pool.in_use_bytes(), 4 * kMiB);
  EXPECT_EQ(pool.Take(1).status().code(), StatusCode::kResourceExhausted);
}

TEST(StagingPoolTest, AFreshBufferDropsCachedOnesToStayWithinTheBound) {
  StagingPool pool(4 * kMiB);
  { StagingBuffer small = pool.Take(kMiB).value(); }  // 1 MiB cached
  EXPECT_EQ(pool.held_bytes(), kMiB);
  // 4 MiB needs a fresh buffer; the cached one is dropped for it, so the take succeeds.
  StagingBuffer whole = pool.Take(4 * kMiB).value();
  EXPECT_EQ(whole.size(), 4 * kMiB);
  EXPECT_EQ(pool.in_use_bytes(), 4 * kMiB);
  EXPECT_EQ(pool.held_bytes(), 4 * kMiB) << "not 5: the cached buffer was freed";
}

}  // namespace
}  // namespace kvtier::store
