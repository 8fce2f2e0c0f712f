// The fleet replay end to end: simulated engines publishing vLLM- and SGLang-format events
// on ZMQ to a real coordinator, routed through its HTTP API. Three conversations take turns
// on two engines with room for everything: routing by prefix sends each turn to the engine
// holding the conversation, reaching the unbounded bound, where round robin loses turns to
// the other engine; the gateway's loads spread new conversations over both engines.
#include "services/cli/fleet_replay.h"

#include <gtest/gtest.h>

#include "tests/testing/test_util.h"

namespace kvtier::cli {
namespace {

// Conversation c's turn t: its first 2 + t blocks, every turn 1 s after the last request.
std::vector<bench::TraceRequest> TakingTurns() {
  std::vector<bench::TraceRequest> requests;
  for (uint64_t turn = 0; turn < 4; ++turn) {
    for (uint64_t c = 0; c < 3; ++c) {
      bench::TraceRequest r;
      r.timestamp_ms = requests.size() * 1000;
      r.output_length = 100;  // 2 s at 20 ms a token: a request still runs at the next one
      for (uint64_t b = 0; b < 2 + turn; ++b) r.hash_ids.push_back(c * 100 + b);
      r.input_length = static_cast<uint32_t>(r.hash_ids.size() * 16);
      requests.push_back(r);
    }
  }
  return requests;
}

uint64_t Blocks(const std::vector<bench::TraceRequest>& requests) {
  uint64_t n = 0;
  for (const auto& r : requests) n += r.hash_ids.size();
  return n;
}

class FleetReplayTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FleetReplayTest, RoutingByPrefixReachesTheBoundWhereRoundRobinDoesNot) {
  const std::vector<bench::TraceRequest> requests = TakingTurns();
  auto report = RunFleetReplay(
      requests,
      {.engines = 2, .engine_blocks = 100, .format = GetParam(), .decode_ms_per_token = 0});
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->requests, 12u);
  EXPECT_EQ(report->blocks, Blocks(requests));
  // Turn t > 0 of a conversation finds its first 1 + t blocks: 3 x (2 + 3 + 4) = 27.
  EXPECT_EQ(report->bound_hit_blocks, 27u);
  EXPECT_EQ(report->routed_hit_blocks, report->bound_hit_blocks);
  EXPECT_LT(report->round_robin_hit_blocks, report->routed_hit_blocks);
  // Prefix alone: a new conversation ties everywhere and goes to the first engine.
  EXPECT_EQ(report->routed_requests_per_engine, (std::vector<uint64_t>{12, 0}));
  // Every block was stored once (capacity for all, nothing removed).
  EXPECT_EQ(report->events, Blocks(requests) - 27);
  EXPECT_EQ(report->messages, 12u);
}

TEST_P(FleetReplayTest, TheGatewaysLoadsSpreadNewConversations) {
  const std::vector<bench::TraceRequest> requests = TakingTurns();
  auto report = RunFleetReplay(
      requests,
      {.engines = 2, .engine_blocks = 100, .format = GetParam(), .decode_ms_per_token = 20});
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_GT(report->routed_requests_per_engine[0], 0u);
  EXPECT_GT(report->routed_requests_per_engine[1], 0u);
  EXPECT_LE(report->routed_hit_blocks, report->bound_hit_blocks);
  EXPECT_GE(report->routed_hit_blocks, report->round_robin_hit_blocks);
  const std::string json = FleetReportJson(*report);
  EXPECT_NE(json.find("\"engine_format\": \"" + GetParam() + "\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"decode_ms_per_token\": 20"), std::string::npos) << json;
}

// The weight reaches the coordinator: by load alone (0) turns leave the engine holding their
// conversation; with prefixes weighed far above loads every turn finds its conversation while
// the loads still spread new conversations.
TEST_P(FleetReplayTest, TheOverlapWeightTradesPrefixesAgainstLoads) {
  const std::vector<bench::TraceRequest> requests = TakingTurns();
  FleetReplayOptions options{
      .engines = 2, .engine_blocks = 100, .format = GetParam(), .decode_ms_per_token = 20};
  options.overlap_weight = 1000;
  auto prefixes = RunFleetReplay(requests, options);
  ASSERT_TRUE(prefixes.ok()) << prefixes.status();
  EXPECT_EQ(prefixes->overlap_weight, 1000);
  EXPECT_EQ(prefixes->routed_hit_blocks, prefixes->bound_hit_blocks);
  EXPECT_GT(prefixes->routed_requests_per_engine[0], 0u);
  EXPECT_GT(prefixes->routed_requests_per_engine[1], 0u);
  options.overlap_weight = 0;
  auto loads = RunFleetReplay(requests, options);
  ASSERT_TRUE(loads.ok()) << loads.status();
  EXPECT_LT(loads->routed_hit_blocks, prefixes->routed_hit_blocks);
}

INSTANTIATE_TEST_SUITE_P(Formats, FleetReplayTest, ::testing::Values("vllm", "sglang"),
                         [](const auto& info) { return info.param; });

TEST(FleetReplayOptionsTest, BadOptionsAreRefusedByName) {
  const std::vector<bench::TraceRequest> requests = TakingTurns();
  EXPECT_EQ(RunFleetReplay(requests, {.engines = 0}).status().code(), StatusCode::kInvalidArgument);
  const Status format = RunFleetReplay(requests, {.format = "tgi"}).status();
  EXPECT_EQ(format.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(format.message().find("\"tgi\""), std::string::npos) << format;
  FleetReplayOptions negative;
  negative.overlap_weight = -1;
  const Status weight = RunFleetReplay(requests, negative).status();
  EXPECT_EQ(weight.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(weight.message().find("--overlap-weight"), std::string::npos) << weight;
  const std::string kvtier = KVTIER_BIN_DIR "/kvtier replay";
  std::string out;
  EXPECT_EQ(testing::RunCommand(kvtier + " --engines 2 --connect 127.0.0.1:1 2>&1", &out), 2)
      << out;
  EXPECT_NE(out.find("--connect does not go with --engines"), std::string::npos) << out;
  EXPECT_EQ(testing::RunCommand(kvtier + " --engine-blocks 5 2>&1", &out), 2) << out;
  EXPECT_NE(out.find("--engine-blocks goes with --engines"), std::string::npos) << out;
  EXPECT_EQ(testing::RunCommand(kvtier + " --overlap-weight 4 2>&1", &out), 2) << out;
  EXPECT_NE(out.find("--overlap-weight goes with --engines"), std::string::npos) << out;
}

}  // namespace
}  // namespace kvtier::cli
