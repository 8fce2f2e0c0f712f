#include "services/store/stream/ticket_table.h"

#include <gtest/gtest.h>

namespace kvtier::store {
namespace {

OpenTransfer Put() {
  OpenTransfer transfer;
  transfer.op = StreamOp::kPut;
  return transfer;
}

TEST(TicketTableTest, ATicketIsTakenOnceWithItsSecret) {
  FakeClock clock;
  TicketTable table(clock, std::chrono::seconds(30));
  const auto added = table.Add(Put()).value();
  const auto other = table.Add(Put()).value();
  EXPECT_NE(added.id, other.id);
  EXPECT_NE(added.secret, other.secret) << "secrets are random, not derived from ids";
  EXPECT_EQ(table.Take(added.id, added.secret, StreamOp::kGet).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(table.Take(added.id, added.secret, StreamOp::kPut).ok()) << "a wrong op leaves the ticket";
  EXPECT_EQ(table.Take(added.id, added.secret, StreamOp::kPut).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(table.size(), 1u);
}

TEST(TicketTableTest, AWrongSecretWithdrawsTheTicket) {
  FakeClock clock;
  TicketTable table(clock, std::chrono::seconds(30));
  const auto added = table.Add(Put()).value();
  EXPECT_EQ(table.Take(added.id, added.secret + 1, StreamOp::kPut).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(table.Take(added.id, added.secret, StreamOp::kPut).status().code(), StatusCode::kNotFound);
}

TEST(TicketTableTest, TicketsExpireInTheOrderTheyWereAdded) {
  FakeClock clock;
  TicketTable table(clock, std::chrono::seconds(30));
  const auto first = table.Add(Put()).value();  // t=0, expires at 30 s
  clock.Advance(std::chrono::seconds(20));
  const auto second = table.Add(Put()).value();  // t=20, expires at 50 s
  const auto taken = table.Add(Put()).value();
  ASSERT_TRUE(table.Take(taken.id, taken.secret, StreamOp::kPut).ok());
  clock.Advance(std::chrono::seconds(15));  // t=35
  EXPECT_EQ(table.Sweep(), 1u);
  EXPECT_EQ(table.Take(first.id, first.secret, StreamOp::kPut).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(table.Take(second.id, second.secret, StreamOp::kPut).ok());
  clock.Advance(std::chrono::seconds(30));
  EXPECT_EQ(table.Sweep(), 0u) << "taken tickets do not count as expired";
  EXPECT_EQ(table.expired(), 1u);
}

}  // namespace
}  // namespace kvtier::store
