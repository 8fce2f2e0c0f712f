#include "common/listener_health.h"

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
  EXPECT_EQ(failing.message(), "the RPC listener cannot accept connections: accept: Too many open files");
  clock.Advance(seconds(4));
  health.Failed("accept: Too many open files in system");
  clock.Advance(seconds(4));
  EXPECT_NE(health.Readiness("x").message().find("in system"), std::string::npos) << "the last failure counts";
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

}  // namespace
}  // namespace kvtier
