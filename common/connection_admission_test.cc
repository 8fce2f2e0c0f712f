#include "common/connection_admission.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace kvtier {
namespace {

using Verdict = ConnectionAdmission::Verdict;

class ConnectionAdmissionTest : public ::testing::Test {
 protected:
  ConnectionAdmission::Admitted Admit(ConnectionAdmission& admission, const std::string& address,
                                      const std::string& name) {
    return admission.Admit(address, [this, name] { shed.push_back(name); });
  }
  std::vector<std::string> shed;
};

TEST_F(ConnectionAdmissionTest, AnAddressMayHaveOnlySoManyWaiting) {
  ConnectionAdmission admission(
      {.max_connections = 100, .max_unauthenticated = 100, .max_unauthenticated_per_address = 2});
  const auto a1 = Admit(admission, "10.0.0.1", "a1");
  const auto a2 = Admit(admission, "10.0.0.1", "a2");
  ASSERT_EQ(a1.verdict, Verdict::kAdmitted);
  ASSERT_EQ(a2.verdict, Verdict::kAdmitted);
  EXPECT_EQ(Admit(admission, "10.0.0.1", "a3").verdict, Verdict::kRefusedAddress);
  EXPECT_EQ(Admit(admission, "10.0.0.2", "b1").verdict, Verdict::kAdmitted);
  EXPECT_TRUE(shed.empty());

  // An authenticated connection no longer counts against its address.
  admission.Authenticated(a1.id);
  EXPECT_EQ(Admit(admission, "10.0.0.1", "a4").verdict, Verdict::kAdmitted);
  EXPECT_EQ(admission.open(), 4u);
  EXPECT_EQ(admission.unauthenticated(), 3u);
}

TEST_F(ConnectionAdmissionTest, TheOldestWaitingIsShedForANewcomer) {
  ConnectionAdmission admission(
      {.max_connections = 100, .max_unauthenticated = 2, .max_unauthenticated_per_address = 100});
  const auto first = Admit(admission, "x", "first");
  Admit(admission, "x", "second");
  const auto third = Admit(admission, "y", "third");
  EXPECT_EQ(third.verdict, Verdict::kAdmitted);
  EXPECT_EQ(third.shed, 1u);
  EXPECT_EQ(shed, std::vector<std::string>{"first"});
  // The shed one closes later; its Closed() is still welcome, once.
  admission.Closed(first.id);
  EXPECT_EQ(admission.open(), 2u);
  EXPECT_EQ(admission.unauthenticated(), 2u);
}

TEST_F(ConnectionAdmissionTest, AtTheConnectionLimitAnAuthenticatedOneIsNeverShed) {
  ConnectionAdmission admission(
      {.max_connections = 2, .max_unauthenticated = 100, .max_unauthenticated_per_address = 100});
  const auto engine = Admit(admission, "x", "engine");
  admission.Authenticated(engine.id);
  const auto idle = Admit(admission, "x", "idle");
  // Full: the waiting one makes room; the engine stays.
  const auto newcomer = Admit(admission, "y", "newcomer");
  EXPECT_EQ(newcomer.verdict, Verdict::kAdmitted);
  EXPECT_EQ(shed, std::vector<std::string>{"idle"});
  // Still full, counting the newcomer, and the shed one is on its way out: the next newcomer
  // sheds the previous one.
  const auto later = Admit(admission, "z", "later");
  EXPECT_EQ(later.verdict, Verdict::kAdmitted);
  EXPECT_EQ(shed, (std::vector<std::string>{"idle", "newcomer"}));
  admission.Authenticated(later.id);
  // Everything open is authenticated: nothing to shed, so a newcomer is refused.
  EXPECT_EQ(Admit(admission, "w", "refused").verdict, Verdict::kRefusedFull);
  admission.Closed(idle.id);
  admission.Closed(newcomer.id);
  EXPECT_EQ(admission.open(), 2u);
  EXPECT_EQ(Admit(admission, "w", "refused-again").verdict, Verdict::kRefusedFull);
  admission.Closed(engine.id);
  EXPECT_EQ(Admit(admission, "w", "admitted").verdict, Verdict::kAdmitted);
}

TEST_F(ConnectionAdmissionTest, ShedOldestFreesWaitingConnectionsInAcceptOrder) {
  ConnectionAdmission admission({});
  Admit(admission, "a", "1");
  const auto second = Admit(admission, "b", "2");
  Admit(admission, "c", "3");
  admission.Authenticated(second.id);
  EXPECT_TRUE(admission.ShedOldest());
  EXPECT_TRUE(admission.ShedOldest());
  EXPECT_FALSE(admission.ShedOldest());
  EXPECT_EQ(shed, (std::vector<std::string>{"1", "3"}));
  EXPECT_EQ(admission.unauthenticated(), 0u);
}

}  // namespace
}  // namespace kvtier
