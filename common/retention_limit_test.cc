// A retention from the wire: up to 100 years converts exactly; past it is refused by
// name, before the nanosecond conversion that would overflow.
#include "common/retention_limit.h"

#include <gtest/gtest.h>

#include <limits>

namespace kvtier {
namespace {

TEST(RetentionLimitTest, UpToTheLimitConvertsToNanoseconds) {
  EXPECT_EQ(RetentionFromMs(0, "retention").value(), Nanos(0)) << "no expiry";
  EXPECT_EQ(RetentionFromMs(1500, "retention").value(), std::chrono::milliseconds(1500));
  const Nanos longest = RetentionFromMs(kMaxRetentionMs, "retention").value();
  EXPECT_EQ(longest.count(), int64_t(kMaxRetentionMs) * 1'000'000);
  // A deadline from the longest retention still fits, whatever the clock read.
  EXPECT_LT(longest.count(), std::numeric_limits<int64_t>::max() / 2);
}

TEST(RetentionLimitTest, PastTheLimitIsRefusedByName) {
  for (const uint64_t ms :
       {kMaxRetentionMs + 1, uint64_t{1} << 55, std::numeric_limits<uint64_t>::max()}) {
    const Result<Nanos> refused = RetentionFromMs(ms, "block retention");
    ASSERT_FALSE(refused.ok()) << ms;
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(refused.status().message().find("block retention of " + std::to_string(ms) + " ms"),
              std::string::npos)
        << refused.status();
    EXPECT_NE(refused.status().message().find("0 means no expiry"), std::string::npos)
        << refused.status();
  }
}

}  // namespace
}  // namespace kvtier
