#include "services/rpc/auth_throttle.h"

#include <gtest/gtest.h>

namespace kvtier::rpc {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

AuthThrottleOptions Options(const FakeClock& clock) {
  return {.burst = 3,
          .per_second = 1.0,
          .max_addresses = 4,
          .log_interval = seconds(10),
          .clock = &clock};
}

TEST(AuthThrottleTest, AnAddressGetsItsBurstThenWaitsForTheRefill) {
  FakeClock clock(seconds(100));
  AuthThrottle throttle(Options(clock));
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(throttle.Admit("10.0.0.1").ok()) << i;
    throttle.Failed("10.0.0.1");
  }
  const Status refused = throttle.Admit("10.0.0.1");
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("10.0.0.1"), std::string::npos) << refused.message();
  EXPECT_NE(refused.message().find("try again in 1 s"), std::string::npos) << refused.message();
  EXPECT_EQ(throttle.refused(), 1u);

  clock.Advance(milliseconds(999));
  EXPECT_FALSE(throttle.Admit("10.0.0.1").ok());
  clock.Advance(milliseconds(1));
  EXPECT_TRUE(throttle.Admit("10.0.0.1").ok());
}

TEST(AuthThrottleTest, OneAddressesFailuresNeverCostAnother) {
  FakeClock clock(seconds(100));
  AuthThrottle throttle(Options(clock));
  for (int i = 0; i < 10; ++i) throttle.Failed("10.0.0.1");
  EXPECT_FALSE(throttle.Admit("10.0.0.1").ok());
  EXPECT_TRUE(throttle.Admit("10.0.0.2").ok());
  EXPECT_TRUE(throttle.Admit("unix").ok());
}

TEST(AuthThrottleTest, ARefillNeverExceedsTheBurst) {
  FakeClock clock(seconds(100));
  AuthThrottle throttle(Options(clock));
  throttle.Failed("a");
  clock.Advance(seconds(3600));
  for (int i = 0; i < 3; ++i) throttle.Failed("a");
  EXPECT_FALSE(throttle.Admit("a").ok());
}

TEST(AuthThrottleTest, FailuresAreLoggedFirstThenOncePerIntervalWithTheirCount) {
  FakeClock clock(seconds(0));
  AuthThrottle throttle(Options(clock));
  EXPECT_EQ(throttle.Failed("a"), 1u);  // the first, even at time 0
  EXPECT_EQ(throttle.Failed("a"), std::nullopt);
  EXPECT_EQ(throttle.Failed("a"), std::nullopt);
  clock.Advance(seconds(10));
  EXPECT_EQ(throttle.Failed("a"), 3u);  // the two unlogged and this one
  EXPECT_EQ(throttle.Failed("b"), 1u);
}

TEST(AuthThrottleTest, ManyAddressesShareAnOverflowBucketInsteadOfGrowingTheTable) {
  FakeClock clock(seconds(100));
  AuthThrottle throttle(Options(clock));
  for (int a = 0; a < 4; ++a) throttle.Failed("held-" + std::to_string(a));
  EXPECT_EQ(throttle.addresses(), 4u);
  for (int a = 0; a < 100; ++a) throttle.Failed("new-" + std::to_string(a));
  EXPECT_EQ(throttle.addresses(), 4u);
  EXPECT_FALSE(throttle.Admit("another-new").ok()) << "the overflow bucket is spent";

  // Once the held buckets refill, new addresses get buckets of their own again.
  clock.Advance(seconds(10));
  throttle.Failed("fresh");
  EXPECT_EQ(throttle.addresses(), 1u);
  EXPECT_TRUE(throttle.Admit("fresh").ok());
}

}  // namespace
}  // namespace kvtier::rpc
