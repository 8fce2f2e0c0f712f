#include "services/bench/trace.h"

#include <gtest/gtest.h>

#include "services/bench/index_driver.h"

namespace kvtier::bench {
namespace {

TEST(TraceTest, ParsesAMooncakeLine) {
  Result<TraceRequest> r = ParseMooncakeLine(
      R"({"timestamp": 27, "input_length": 1025, "output_length": 12, "hash_ids": [0, 14, 15]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->timestamp_ms, 27u);
  EXPECT_EQ(r->input_length, 1025u);
  EXPECT_EQ(r->hash_ids, (std::vector<uint64_t>{0, 14, 15}));
}

TEST(TraceTest, MalformedLinesNameTheField) {
  EXPECT_NE(ParseMooncakeLine("{\"timestamp\": 1}").status().message().find("input_length"),
            std::string::npos);
  EXPECT_NE(ParseMooncakeLine(
                R"({"timestamp": -1, "input_length": 1, "output_length": 1, "hash_ids": [0]})")
                .status()
                .message()
                .find("timestamp"),
            std::string::npos);
  EXPECT_NE(ParseMooncakeLine(
                R"({"timestamp": 0, "input_length": 2000, "output_length": 1, "hash_ids": [0]})")
                .status()
                .message()
                .find("needs 4 blocks"),
            std::string::npos);
  // The largest length: its block count is taken in 64 bits, not wrapped to none.
  EXPECT_NE(
      ParseMooncakeLine(
          R"({"timestamp": 0, "input_length": 4294967295, "output_length": 1, "hash_ids": []})")
          .status()
          .message()
          .find("needs 8388608 blocks"),
      std::string::npos);
  EXPECT_FALSE(ParseMooncakeLine("[1, 2").ok());
  EXPECT_EQ(ReadMooncakeTrace("/nonexistent.jsonl").status().code(), StatusCode::kNotFound);
}

// Two workers with room for 4 blocks each: the second request reuses the first's prefix on
// the same worker; a long third request forces evictions.
TEST(IndexBenchTest, CountsHitsAndEvictionsOfATinyTrace) {
  const std::vector<TraceRequest> trace = {
      {0, 1536, 1, {1, 2, 3}},     // 3 new blocks on worker 0
      {1, 2048, 1, {1, 2, 3, 4}},  // blocks 1-3 reused, block 4 new
      {2, 2048, 1, {9, 8, 7, 6}},  // nothing cached: the emptier worker 1
      {3, 2048, 1, {1, 2, 3, 5}},  // blocks 1-3 reused; worker 0 is full: block 4 goes
  };
  IndexBenchOptions options;
  options.workers = 2;
  options.gpu_blocks_per_worker = 4;
  options.passes = 1;
  Result<IndexBenchResult> r = RunIndexBench(trace, options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->lookups, 4u);
  EXPECT_EQ(r->blocks_looked_up, 15u);
  EXPECT_DOUBLE_EQ(r->hit_rate, (3.0 + 3.0) / 15.0);  // requests 2 and 4 reuse 3 blocks each
  EXPECT_EQ(r->stored_blocks, 3u + 1u + 4u + 1u);
  EXPECT_EQ(r->removed_blocks, 1u);  // worker 0 holds 4 and must make room for block 5
  EXPECT_GT(r->ops_per_sec, 0.0);
}

}  // namespace
}  // namespace kvtier::bench
