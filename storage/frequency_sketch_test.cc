#include "storage/frequency_sketch.h"

#include <gtest/gtest.h>

namespace kvtier::storage {
namespace {

BlockKey Key(uint64_t id) { return OpaqueKeyNamespace("test", "").Key(id); }

TEST(FrequencySketchTest, TheDoorkeeperTakesTheFirstRequestAndCountersTheRest) {
  FrequencySketch sketch = *FrequencySketch::Create({});
  EXPECT_EQ(sketch.Estimate(Key(1)), 0) << "never seen";
  sketch.Record(Key(1));
  EXPECT_EQ(sketch.Estimate(Key(1)), 1);
  sketch.Record(Key(1));
  EXPECT_EQ(sketch.Estimate(Key(1)), 2);
  EXPECT_EQ(sketch.Estimate(Key(2)), 0);
}

TEST(FrequencySketchTest, EstimatesNeverUndercountAndSaturateAt16) {
  FrequencySketch sketch = *FrequencySketch::Create({.width = 1024, .sample_size = 1u << 30});
  for (uint64_t id = 0; id < 500; ++id) {
    for (uint64_t n = 0; n <= id % 4; ++n) sketch.Record(Key(id));
  }
  for (uint64_t id = 0; id < 500; ++id) EXPECT_GE(sketch.Estimate(Key(id)), id % 4 + 1) << id;
  for (int i = 0; i < 40; ++i) sketch.Record(Key(9999));
  EXPECT_EQ(sketch.Estimate(Key(9999)), 16);
}

TEST(FrequencySketchTest, EstimatesOfASparseSketchAreExact) {
  // 64 keys in 64 Ki counters a row: a collision in all four rows is all but impossible.
  FrequencySketch sketch = *FrequencySketch::Create({.width = 1 << 16, .sample_size = 1u << 30});
  for (uint64_t id = 0; id < 64; ++id) {
    for (uint64_t n = 0; n < id % 7; ++n) sketch.Record(Key(id));
  }
  for (uint64_t id = 0; id < 64; ++id) EXPECT_EQ(sketch.Estimate(Key(id)), id % 7) << id;
}

TEST(FrequencySketchTest, AgingHalvesCountsAndEmptiesTheDoorkeeper) {
  FrequencySketch sketch = *FrequencySketch::Create({.width = 1024, .sample_size = 10});
  for (int i = 0; i < 9; ++i) sketch.Record(Key(1));  // door + 8 counted
  EXPECT_EQ(sketch.Estimate(Key(1)), 9);
  sketch.Record(Key(2));  // the 10th request ages: 8 -> 4, the door forgets both keys
  EXPECT_EQ(sketch.agings(), 1u);
  EXPECT_EQ(sketch.Estimate(Key(1)), 4);
  EXPECT_EQ(sketch.Estimate(Key(2)), 0);
  sketch.Record(Key(1));  // back through the door
  EXPECT_EQ(sketch.Estimate(Key(1)), 5);
}

TEST(FrequencySketchTest, BadOptionsAreNamed) {
  EXPECT_NE(FrequencySketch::Create({.width = 1000}).status().message().find("power of two"),
            std::string::npos);
  EXPECT_NE(FrequencySketch::Create({.width = 32}).status().message().find("at least 64"),
            std::string::npos);
  EXPECT_NE(FrequencySketch::Create({.sample_size = 0}).status().message().find("sample_size"),
            std::string::npos);
}

}  // namespace
}  // namespace kvtier::storage
