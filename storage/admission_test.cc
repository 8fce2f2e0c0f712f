#include "storage/admission.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvtier::storage {
namespace {

BlockKey Key(uint64_t id) { return OpaqueKeyNamespace("test", "").Key(id); }

std::unique_ptr<DiskAdmission> Make(AdmissionPolicy policy, uint64_t seed = 1) {
  auto admission = DiskAdmission::Create({.policy = policy, .seed = seed});
  EXPECT_TRUE(admission.ok()) << admission.status();
  return std::move(admission).value();
}

// Records `times` requests of block `id`.
void Request(DiskAdmission& admission, uint64_t id, int times) {
  const BlockKey key = Key(id);
  for (int i = 0; i < times; ++i) admission.Record({&key, 1});
}

std::vector<DisplacedBlock> Victims(std::initializer_list<uint64_t> ids, uint8_t priority = 35) {
  std::vector<DisplacedBlock> victims;
  for (uint64_t id : ids) victims.push_back({Key(id), priority});
  return victims;
}

TEST(DiskAdmissionTest, NothingDisplacedAlwaysAdmits) {
  for (auto policy : {AdmissionPolicy::kAll, AdmissionPolicy::kMinCount, AdmissionPolicy::kTinyLfu})
    EXPECT_TRUE(Make(policy)->Admit(Key(1), 35, {})) << AdmissionPolicyName(policy);
}

TEST(DiskAdmissionTest, TinyLfuAdmitsACandidateRequestedAsOftenAsEveryVictim) {
  auto admission = Make(AdmissionPolicy::kTinyLfu);
  Request(*admission, 1, 3);
  Request(*admission, 10, 2);
  Request(*admission, 11, 1);
  EXPECT_TRUE(admission->Admit(Key(1), 35, Victims({10, 11})));
  Request(*admission, 11, 2);  // now as often as the candidate
  EXPECT_TRUE(admission->Admit(Key(1), 35, Victims({10, 11}))) << "a tie goes to the candidate";
  Request(*admission, 11, 1);  // more often than the candidate
  EXPECT_FALSE(admission->Admit(Key(1), 35, Victims({10, 11})));
  EXPECT_FALSE(admission->Admit(Key(2), 35, Victims({10}))) << "never seen, against 2 requests";
  const DiskAdmissionStats stats = admission->Stats();
  EXPECT_EQ(stats.admitted, 2u);
  EXPECT_EQ(stats.rejected, 2u);
}

TEST(DiskAdmissionTest, TinyLfuLetsPriorityDecideBeforeFrequency) {
  auto admission = Make(AdmissionPolicy::kTinyLfu);
  Request(*admission, 10, 5);
  // A higher priority displaces a block requested more often; a lower one never does.
  EXPECT_TRUE(admission->Admit(Key(1), 80, Victims({10})));
  Request(*admission, 2, 9);
  EXPECT_FALSE(admission->Admit(Key(2), 10, Victims({11})));
  // Against victims of both kinds, each is weighed by its own rule.
  std::vector<DisplacedBlock> mixed = Victims({11}, 20);
  mixed.push_back({Key(10), 35});
  EXPECT_TRUE(admission->Admit(Key(2), 35, mixed)) << "9 requests beat 5";
  mixed.push_back({Key(12), 50});
  EXPECT_FALSE(admission->Admit(Key(2), 35, mixed));
}

TEST(DiskAdmissionTest, AFrequentLoserStillEntersOneTimeInAbout128) {
  auto admission = Make(AdmissionPolicy::kTinyLfu, /*seed=*/42);
  Request(*admission, 1, 6);
  Request(*admission, 10, 12);
  int admitted = 0;
  for (int i = 0; i < 12800; ++i) admitted += admission->Admit(Key(1), 35, Victims({10})) ? 1 : 0;
  EXPECT_GT(admitted, 50);
  EXPECT_LT(admitted, 160);
  EXPECT_EQ(admission->Stats().admitted_by_chance, static_cast<uint64_t>(admitted));
  // A candidate requested fewer than 6 times never gets the draw.
  Request(*admission, 2, 5);
  for (int i = 0; i < 2000; ++i) ASSERT_FALSE(admission->Admit(Key(2), 35, Victims({10})));
}

TEST(DiskAdmissionTest, MinCountIsAThresholdAndAllAdmitsEverything) {
  auto min_count = DiskAdmission::Create({.policy = AdmissionPolicy::kMinCount, .min_count = 3});
  ASSERT_TRUE(min_count.ok());
  Request(**min_count, 1, 2);
  Request(**min_count, 10, 1);
  EXPECT_FALSE((*min_count)->Admit(Key(1), 35, Victims({10})));
  Request(**min_count, 1, 1);
  EXPECT_TRUE((*min_count)->Admit(Key(1), 35, Victims({10})));
  auto all = Make(AdmissionPolicy::kAll);
  Request(*all, 10, 16);
  EXPECT_TRUE(all->Admit(Key(1), 0, Victims({10}, 100)));
}

TEST(DiskAdmissionTest, BadOptionsAndNamesAreNamed) {
  EXPECT_NE(DiskAdmission::Create({.min_count = 0}).status().message().find("[1, 16]"),
            std::string::npos);
  EXPECT_EQ(DiskAdmission::Create({.min_count = 17}).status().code(), StatusCode::kInvalidArgument);
  const Status bad = ParseAdmissionPolicy("lfu").status();
  EXPECT_NE(bad.message().find("\"lfu\""), std::string::npos);
  EXPECT_NE(bad.message().find("tinylfu"), std::string::npos);
  for (auto policy : {AdmissionPolicy::kAll, AdmissionPolicy::kMinCount, AdmissionPolicy::kTinyLfu})
    EXPECT_EQ(*ParseAdmissionPolicy(AdmissionPolicyName(policy)), policy);
}

}  // namespace
}  // namespace kvtier::storage
