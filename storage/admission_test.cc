#include "storage/admission.h"

#include <gtest/gtest.h>

namespace kvtier::storage {
namespace {

BlockKey Key(uint64_t id) { return OpaqueKeyNamespace("test", "").Key(id); }

TEST(FrequencyFilterTest, BlocksSeenOnceAreNotAdmitted) {
  FrequencyFilter filter = *FrequencyFilter::Create({});
  filter.Record(Key(1));
  EXPECT_FALSE(filter.Admit(Key(1))) << "seen once";
  filter.Record(Key(1));
  EXPECT_TRUE(filter.Admit(Key(1))) << "seen twice";
  EXPECT_FALSE(filter.Admit(Key(2))) << "never seen";
}

TEST(FrequencyFilterTest, EstimatesNeverUndercountAndSaturateAt15) {
  FrequencyFilter filter = *FrequencyFilter::Create({1024, 1u << 30, 2});
  for (uint64_t id = 0; id < 500; ++id) {
    for (uint64_t n = 0; n <= id % 4; ++n) filter.Record(Key(id));
  }
  for (uint64_t id = 0; id < 500; ++id) EXPECT_GE(filter.Estimate(Key(id)), id % 4 + 1) << id;
  for (int i = 0; i < 40; ++i) filter.Record(Key(9999));
  EXPECT_EQ(filter.Estimate(Key(9999)), 15);
}

TEST(FrequencyFilterTest, AgingHalvesOldCounts) {
  FrequencyFilter filter = *FrequencyFilter::Create({1024, 8, 2});
  for (int i = 0; i < 4; ++i) filter.Record(Key(1));  // 4
  for (int i = 0; i < 4; ++i) filter.Record(Key(2));  // the 8th record ages: 4 -> 2 for both
  EXPECT_EQ(filter.agings(), 1u);
  EXPECT_EQ(filter.Estimate(Key(1)), 2);
}

TEST(FrequencyFilterTest, BadOptionsAreNamed) {
  EXPECT_NE(FrequencyFilter::Create({1000, 8, 2}).status().message().find("power of two"),
            std::string::npos);
  EXPECT_NE(FrequencyFilter::Create({1024, 8, 16}).status().message().find("[1, 15]"),
            std::string::npos);
  EXPECT_EQ(FrequencyFilter::Create({1024, 0, 2}).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier::storage
