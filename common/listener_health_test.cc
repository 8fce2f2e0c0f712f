#include "common/listener_health.h"

#include <sys/resource.h>

#include <algorithm>

#include <gtest/gtest.h>

namespace kvtier {
namespace {

using std::chrono::seconds;

TEST(ListenerHealthTest, NotReadyWhileAcceptsFailThenReadyOnceTheyStop) {
  FakeClock clock(seconds(0));
  ListenerHealth health(seconds(5), &clock);
  EXPECT_TRUE(health.Readiness("the RPC listener").ok());
  health.Failed("accept: Too many open files");
  const Status failing = health.Readiness("the RPC listener");
  EXPECT_EQ(failing.code(), StatusCode::kUnavailable);
  EXPECT_EQ(failing.message(),
            "the RPC listener cannot accept connections: accept: Too many open files");
  clock.Advance(seconds(4));
  health.Failed("accept: Too many open files in system");
  clock.Advance(seconds(4));
  EXPECT_NE(health.Readiness("x").message().find("in system"), std::string::npos)
      << "the last failure counts";
  clock.Advance(seconds(1));
  EXPECT_TRUE(health.Readiness("x").ok());
}

TEST(ListenerHealthTest, LogsTheFirstFailureThenOneLinePerIntervalWithItsCount) {
  FakeClock clock(seconds(0));
  ListenerHealth health(seconds(5), &clock);
  EXPECT_EQ(health.Failed("e"), 1u);
  EXPECT_EQ(health.Failed("e"), std::nullopt);
  clock.Advance(seconds(4));
  EXPECT_EQ(health.Failed("e"), std::nullopt);
  clock.Advance(seconds(1));
  EXPECT_EQ(health.Failed("e"), 3u);
}

TEST(DescriptorLimitTest, TheSoftLimitIsRaisedToTheHardOneAndTheSharesFollowIt) {
  rlimit original{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &original), 0);
  if (original.rlim_max == RLIM_INFINITY || original.rlim_max < 512)
    GTEST_SKIP() << "no finite hard limit to raise to";
  rlimit lowered = original;
  lowered.rlim_cur = 256;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lowered), 0);
  EXPECT_EQ(DescriptorShare(1, 2), 128u);
  EXPECT_EQ(RaiseDescriptorLimit(), original.rlim_max);
  rlimit now{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &now), 0);
  EXPECT_EQ(now.rlim_cur, original.rlim_max);
  EXPECT_EQ(DescriptorShare(1, 4), std::min<rlim_t>(original.rlim_max / 4, rlim_t{1} << 20));
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &original), 0);
}

}  // namespace
}  // namespace kvtier
