#include "common/block_vocabulary.h"

#include <gtest/gtest.h>

namespace kvtier {
namespace {

using std::chrono::seconds;

TEST(TierTest, NamesAreTheMetricLabels) {
  EXPECT_EQ(TierName(Tier::kGpu), "gpu");
  EXPECT_EQ(TierName(Tier::kHost), "host");
  EXPECT_EQ(TierName(Tier::kDisk), "disk");
  EXPECT_EQ(TierName(static_cast<Tier>(7)), "unknown");
}

TEST(RetentionTest, RangesDecodeAndDefault) {
  // 16-token blocks, 64-token prompt, 32 generated tokens: blocks 0-3 prompt, 4-5 decode.
  RetentionConfig config;
  config.ranges = {{0, 16, 90, seconds(30)},               // the system prompt: block 0
                   {32, std::nullopt, 10, std::nullopt}};  // tokens 32.. of the prompt: blocks 2, 3
  config.decode_priority = 5;
  config.decode_duration = seconds(2);
  Result<std::vector<BlockRetention>> r = ComputeBlockRetention(config, 16, 64, 96);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 6u);
  EXPECT_EQ((*r)[0].priority, 90);
  EXPECT_EQ((*r)[0].duration, seconds(30));
  EXPECT_EQ((*r)[1].priority, kDefaultPriority) << "no range covers tokens 16-31";
  EXPECT_EQ((*r)[1].duration.count(), 0) << "the default never expires";
  EXPECT_EQ((*r)[2].priority, 10);
  EXPECT_EQ((*r)[3].priority, 10);
  EXPECT_EQ((*r)[4].priority, 5);
  EXPECT_EQ((*r)[5].duration, seconds(2));
}

TEST(RetentionTest, LaterRangeWinsWhereRangesOverlapABlock) {
  RetentionConfig config;
  config.ranges = {{0, 40, 80, std::nullopt}, {20, 30, 20, std::nullopt}};
  Result<std::vector<BlockRetention>> r = ComputeBlockRetention(config, 16, 48, 48);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].priority, 80);
  EXPECT_EQ((*r)[1].priority, 20) << "tokens 16-31 overlap both; the later range wins";
  EXPECT_EQ((*r)[2].priority, 80);
}

TEST(RetentionTest, PartialLastBlockHasNoEntry) {
  EXPECT_EQ(ComputeBlockRetention({}, 16, 40, 40)->size(), 2u);
}

TEST(RetentionTest, BadConfigsNameTheRange) {
  RetentionConfig bad_priority;
  bad_priority.ranges = {{0, 16, 35, std::nullopt}, {0, 16, 101, std::nullopt}};
  EXPECT_NE(ComputeBlockRetention(bad_priority, 16, 64, 64)
                .status()
                .message()
                .find("range 1: priority 101"),
            std::string::npos);
  RetentionConfig empty_range;
  empty_range.ranges = {{16, 16, 50, std::nullopt}};
  EXPECT_EQ(ComputeBlockRetention(empty_range, 16, 64, 64).status().code(),
            StatusCode::kInvalidArgument);
  RetentionConfig bad_decode;
  bad_decode.decode_priority = 200;
  EXPECT_EQ(ComputeBlockRetention(bad_decode, 16, 64, 64).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ComputeBlockRetention({}, 16, 65, 64).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier
