#include "common/status.h"

#include <gtest/gtest.h>

namespace kvtier {
namespace {

TEST(StatusTest, DefaultIsOkAndCarriesNoMessage) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_EQ(Status(StatusCode::kOk, "ignored").message(), "");
}

TEST(StatusTest, ErrorNamesCodeAndMessage) {
  Status s = ResourceExhaustedError("pool gpu0 is full (16384 of 16384 blocks)");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s.ToString(), "RESOURCE_EXHAUSTED: pool gpu0 is full (16384 of 16384 blocks)");
  EXPECT_EQ(s.WithContext("allocate").message(),
            "allocate: pool gpu0 is full (16384 of 16384 blocks)");
}

// A constant's copies all read the one message made once; they compare and print as a
// Status made with that text does, and take context as any other.
TEST(StatusTest, AConstantReadsItsOneMessageInEveryCopy) {
  static const std::string* const kMiss = MessageConstant("the block is not in the host tier");
  const Status miss = Status::Constant(StatusCode::kNotFound, kMiss);
  const Status copy = miss;  // NOLINT: the copy is the point
  EXPECT_FALSE(copy.ok());
  EXPECT_EQ(copy.code(), StatusCode::kNotFound);
  EXPECT_EQ(&copy.message(), kMiss) << "a copy shares the message, it does not copy it";
  EXPECT_EQ(copy, NotFoundError("the block is not in the host tier"));
  EXPECT_NE(copy, NotFoundError("another message"));
  EXPECT_EQ(copy.ToString(), "NOT_FOUND: the block is not in the host tier");
  EXPECT_EQ(copy.WithContext("get").message(), "get: the block is not in the host tier");
  const Result<int> failed = miss;
  EXPECT_EQ(&failed.status().message(), kMiss);
}

TEST(StatusTest, RetryAdviceFollowsCanonicalMeaning) {
  EXPECT_EQ(UnavailableError("x").retry_advice(), RetryAdvice::kWithBackoff);
  EXPECT_EQ(ResourceExhaustedError("x").retry_advice(), RetryAdvice::kWithBackoff);
  EXPECT_EQ(DeadlineExceededError("x").retry_advice(), RetryAdvice::kWithBackoff);
  EXPECT_EQ(AbortedError("x").retry_advice(), RetryAdvice::kAtHigherLevel);
  for (Status s : {InvalidArgumentError("x"), NotFoundError("x"), FailedPreconditionError("x"),
                   PermissionDeniedError("x"), UnauthenticatedError("x"), DataLossError("x"),
                   InternalError("x"), UnimplementedError("x"), OutOfRangeError("x")}) {
    EXPECT_EQ(s.retry_advice(), RetryAdvice::kNever) << s;
  }
}

Result<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgumentError(std::to_string(x) + " is odd");
  return x / 2;
}

Result<int> Quarter(int x) {
  KVTIER_ASSIGN_OR_RETURN(int half, Half(x));
  KVTIER_ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

TEST(ResultTest, HoldsValueOrStatus) {
  Result<int> ok = Quarter(12);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 3);
  Result<int> bad = Quarter(6);  // 6 -> 3, then 3 is odd
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "3 is odd");
  EXPECT_EQ(bad.value_or(-1), -1);
}

Status CheckAll(int a, int b) {
  KVTIER_RETURN_IF_ERROR(Half(a).status());
  KVTIER_RETURN_IF_ERROR(Half(b).status());
  return Status::Ok();
}

TEST(ResultTest, ReturnIfErrorStopsAtFirstFailure) {
  EXPECT_TRUE(CheckAll(2, 4).ok());
  EXPECT_EQ(CheckAll(1, 3).message(), "1 is odd");
  EXPECT_EQ(CheckAll(2, 5).message(), "5 is odd");
}

// 6 halves to 3, and 3 is odd: value() on that error aborts naming it, in every build
// (a release build would otherwise read an empty optional).
TEST(ResultDeathTest, ValueOnAnErrorAbortsNamingTheStatus) {
  const Result<int> bad = Quarter(6);
  EXPECT_DEATH((void)bad.value(), "Result::value\\(\\) on an error: INVALID_ARGUMENT: 3 is odd");
  EXPECT_DEATH((void)Quarter(6).value(), "3 is odd");
}

TEST(ResultTest, MovesOutOwnedValues) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(7);
  std::unique_ptr<int> owned = std::move(r).value();
  ASSERT_NE(owned, nullptr);
  EXPECT_EQ(*owned, 7);
}

}  // namespace
}  // namespace kvtier
