#include "common/clock.h"

#include <gtest/gtest.h>

namespace kvtier {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(FakeClockTest, MovesOnlyWhenTold) {
  FakeClock clock(seconds(100));
  EXPECT_EQ(clock.Now(), seconds(100));
  EXPECT_EQ(clock.Now(), seconds(100));
  clock.Advance(milliseconds(1500));
  EXPECT_EQ(clock.Now(), milliseconds(101500));
  clock.Set(seconds(200));
  EXPECT_EQ(clock.Now(), seconds(200));
}

TEST(SystemClockTest, IsMonotonic) {
  const Clock& clock = SystemClock::Instance();
  Nanos previous = clock.Now();
  for (int i = 0; i < 1000; ++i) {
    const Nanos now = clock.Now();
    ASSERT_GE(now, previous);
    previous = now;
  }
}

}  // namespace
}  // namespace kvtier
