#include "services/rpc/status_mapping.h"

#include <gtest/gtest.h>

namespace kvtier::rpc {
namespace {

TEST(StatusMappingTest, EveryCodeSurvivesTheRoundTrip) {
  for (int c = 1; c <= static_cast<int>(StatusCode::kUnauthenticated); ++c) {
    const Status original(static_cast<StatusCode>(c), "pool 3: block 17 is not allocated");
    const Status back = ExceptionToStatus(StatusToException(original));
    EXPECT_EQ(back, original) << original;
  }
}

TEST(StatusMappingTest, RemotePrefixIsIgnored) {
  const kj::Exception remote(kj::Exception::Type::FAILED, __FILE__, __LINE__,
                             kj::heapString("remote exception: kvtier[NOT_FOUND] unknown node n1"));
  EXPECT_EQ(ExceptionToStatus(remote), NotFoundError("unknown node n1"));
}

TEST(StatusMappingTest, KjTypesCarryRetryMeaning) {
  EXPECT_EQ(StatusToException(ResourceExhaustedError("full")).getType(),
            kj::Exception::Type::OVERLOADED);
  EXPECT_EQ(StatusToException(UnavailableError("down")).getType(),
            kj::Exception::Type::DISCONNECTED);
  const kj::Exception dropped(kj::Exception::Type::DISCONNECTED, __FILE__, __LINE__,
                              kj::heapString("peer disconnected"));
  EXPECT_EQ(ExceptionToStatus(dropped).code(), StatusCode::kUnavailable);
  const kj::Exception unknown_method(kj::Exception::Type::UNIMPLEMENTED, __FILE__, __LINE__,
                                     kj::heapString("Method not implemented."));
  EXPECT_EQ(ExceptionToStatus(unknown_method).code(), StatusCode::kUnimplemented);
  const kj::Exception bug(kj::Exception::Type::FAILED, __FILE__, __LINE__,
                          kj::heapString("std::bad_alloc"));
  EXPECT_EQ(ExceptionToStatus(bug).code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace kvtier::rpc
