#include "services/store/stream/ticket_table.h"

#include <bit>

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
  EXPECT_EQ(table.Take(added.id, added.secret, StreamOp::kGet).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(table.Take(added.id, added.secret, StreamOp::kPut).ok())
      << "a wrong op leaves the ticket";
  EXPECT_EQ(table.Take(added.id, added.secret, StreamOp::kPut).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(table.size(), 1u);
}

TEST(TicketTableTest, AWrongSecretIsRefusedAndLeavesTheTicketToItsOwner) {
  FakeClock clock;
  TicketTable table(clock, std::chrono::seconds(30));
  const auto added = table.Add(Put()).value();
  for (uint64_t guess = 1; guess <= 20; ++guess) {
    EXPECT_EQ(table.Take(added.id, added.secret + guess, StreamOp::kPut).status().code(),
              StatusCode::kPermissionDenied);
  }
  EXPECT_TRUE(table.Take(added.id, added.secret, StreamOp::kPut).ok());
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
  EXPECT_EQ(table.Take(first.id, first.secret, StreamOp::kPut).status().code(),
            StatusCode::kNotFound);
  EXPECT_TRUE(table.Take(second.id, second.secret, StreamOp::kPut).ok());
  clock.Advance(std::chrono::seconds(30));
  EXPECT_EQ(table.Sweep(), 0u) << "taken tickets do not count as expired";
  EXPECT_EQ(table.expired(), 1u);
}

StreamSession Session(std::string format) {
  return StreamSession{.op = StreamOp::kGetKeys, .format_tag = std::move(format), .salt_scope = 7};
}

TEST(TicketTableTest, IdsAreRandomNotSequential) {
  FakeClock clock;
  TicketTable table(clock, std::chrono::seconds(30));
  const auto first = table.Add(Put()).value();
  const auto second = table.Add(Put()).value();
  const auto session = table.AddSession(Session("fmt")).value();
  // Sequential ids would differ by 1; random ones differ in about half their 64 bits.
  EXPECT_GT(std::popcount(first.id ^ second.id), 8);
  EXPECT_GT(std::popcount(second.id ^ session.id), 8);
  EXPECT_EQ(table.Take(first.id + 1, first.secret, StreamOp::kPut).status().code(),
            StatusCode::kNotFound);
}

TEST(TicketTableTest, AGetSessionServesEveryUseWhileUsedWithinItsTtl) {
  FakeClock clock;
  TicketTable table(clock, std::chrono::seconds(30));
  const auto added = table.AddSession(Session("fmt")).value();  // t=0
  for (int i = 0; i < 3; ++i) {
    clock.Advance(std::chrono::seconds(20));  // t=20, 40, 60: each use within 30 s of the last
    const auto used = table.UseSession(added.id, added.secret, StreamOp::kGetKeys);
    ASSERT_TRUE(used.ok()) << "use " << i << ": " << used.status();
    EXPECT_EQ((*used)->format_tag, "fmt");
    EXPECT_EQ((*used)->salt_scope, 7u);
  }
  EXPECT_EQ(table.sessions(), 1u);
  EXPECT_EQ(table.size(), 0u) << "a session is not a ticket";
  clock.Advance(std::chrono::seconds(30));  // t=90: idle for the ttl
  EXPECT_EQ(table.UseSession(added.id, added.secret, StreamOp::kGetKeys).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(table.sessions(), 0u);
}

TEST(TicketTableTest, SweepDropsIdleSessionsOnly) {
  FakeClock clock;
  TicketTable table(clock, std::chrono::seconds(30));
  const auto idle = table.AddSession(Session("a")).value();  // t=0
  const auto busy = table.AddSession(Session("b")).value();
  clock.Advance(std::chrono::seconds(20));
  ASSERT_TRUE(table.UseSession(busy.id, busy.secret, StreamOp::kGetKeys).ok());  // t=20
  clock.Advance(std::chrono::seconds(15));                                       // t=35
  EXPECT_EQ(table.Sweep(), 1u);
  EXPECT_EQ(table.UseSession(idle.id, idle.secret, StreamOp::kGetKeys).status().code(),
            StatusCode::kNotFound);
  EXPECT_TRUE(table.UseSession(busy.id, busy.secret, StreamOp::kGetKeys).ok());
}

TEST(TicketTableTest, SessionsAndTicketsAreNotInterchangeableAndAWrongSecretCostsTheOwnerNothing) {
  FakeClock clock;
  TicketTable table(clock, std::chrono::seconds(30));
  const auto session = table.AddSession(Session("fmt")).value();
  const auto ticket = table.Add(Put()).value();
  EXPECT_NE(session.id, ticket.id);
  EXPECT_EQ(table.Take(session.id, session.secret, StreamOp::kGet).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(table.UseSession(ticket.id, ticket.secret, StreamOp::kGetKeys).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(table.Take(ticket.id, ticket.secret, StreamOp::kPut).ok())
      << "the ticket is still there";
  EXPECT_EQ(table.UseSession(session.id, session.secret + 1, StreamOp::kGetKeys).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_TRUE(table.UseSession(session.id, session.secret, StreamOp::kGetKeys).ok())
      << "a guess costs the owner nothing";
}

TEST(TicketTableTest, ASessionServesItsOwnOperationOnly) {
  FakeClock clock;
  TicketTable table(clock, std::chrono::seconds(30));
  const auto gets = table.AddSession(Session("fmt")).value();
  const auto puts =
      table.AddSession({.op = StreamOp::kPutHeaders, .salt_scope = 9, .any_scope = true}).value();
  EXPECT_EQ(table.sessions(), 2u);
  EXPECT_EQ(table.UseSession(gets.id, gets.secret, StreamOp::kPutHeaders).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(table.UseSession(puts.id, puts.secret, StreamOp::kGetKeys).status().code(),
            StatusCode::kInvalidArgument);
  // Asking with the right secret for the other operation costs neither session.
  const auto put_session = table.UseSession(puts.id, puts.secret, StreamOp::kPutHeaders);
  ASSERT_TRUE(put_session.ok()) << put_session.status();
  EXPECT_EQ((*put_session)->salt_scope, 9u);
  EXPECT_TRUE((*put_session)->any_scope);
  EXPECT_TRUE(table.UseSession(gets.id, gets.secret, StreamOp::kGetKeys).ok());
}

}  // namespace
}  // namespace kvtier::store
