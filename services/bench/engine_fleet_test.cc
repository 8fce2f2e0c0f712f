// The simulated engine's cache and events, and its payloads read back by the coordinator's
// own decoder (services/coordinator/engines) in both wire forms.
#include "services/bench/engine_fleet.h"

#include <gtest/gtest.h>

#include <variant>

#include "services/coordinator/engines/engine_event.h"

namespace kvtier::bench {
namespace {

using Blocks = std::vector<uint64_t>;

TEST(SimulatedEngineTest, ARequestReusesItsCachedPrefixAndStoresTheRest) {
  SimulatedEngine engine(8);
  EngineStep first = engine.Serve(Blocks{1, 2, 3});
  EXPECT_EQ(first.hit_blocks, 0u);
  ASSERT_EQ(first.stored.size(), 1u);
  EXPECT_EQ(first.stored[0].parent, std::nullopt);
  EXPECT_EQ(first.stored[0].blocks, (Blocks{1, 2, 3}));
  EXPECT_TRUE(first.removed.empty());

  EngineStep second = engine.Serve(Blocks{1, 2, 4, 5});
  EXPECT_EQ(second.hit_blocks, 2u);
  ASSERT_EQ(second.stored.size(), 1u);
  EXPECT_EQ(second.stored[0].parent, std::optional<uint64_t>(2));
  EXPECT_EQ(second.stored[0].blocks, (Blocks{4, 5}));
  EXPECT_EQ(engine.size(), 5u);
}

TEST(SimulatedEngineTest, EvictionTakesTheLeastRecentChainLeafFirst) {
  SimulatedEngine engine(5);
  (void)engine.Serve(Blocks{1, 2, 3});
  EngineStep step = engine.Serve(Blocks{7, 8, 9});  // 6 blocks for 5: one goes
  EXPECT_EQ(step.removed, (Blocks{3}));             // the older request's leaf, not its root
  EXPECT_TRUE(engine.Holds(1));
  step = engine.Serve(Blocks{1, 2, 3});  // 3 is computed again; 2 and 1 hit
  EXPECT_EQ(step.hit_blocks, 2u);
  EXPECT_EQ(step.removed, (Blocks{9}));
}

TEST(SimulatedEngineTest, ACachedBlockAfterAMissSplitsTheStoredRuns) {
  // An engine holding 1 and 3 but not 2: a request [1, 2, 3, 5] stores 2, then 5 under 3.
  SimulatedEngine gap(16);
  (void)gap.Serve(Blocks{1});
  (void)gap.Serve(Blocks{9, 3});
  const EngineStep step = gap.Serve(Blocks{1, 2, 3, 5});
  EXPECT_EQ(step.hit_blocks, 1u);
  ASSERT_EQ(step.stored.size(), 2u);
  EXPECT_EQ(step.stored[0].parent, std::optional<uint64_t>(1));
  EXPECT_EQ(step.stored[0].blocks, (Blocks{2}));
  EXPECT_EQ(step.stored[1].parent, std::optional<uint64_t>(3));
  EXPECT_EQ(step.stored[1].blocks, (Blocks{5}));
}

TEST(SyntheticTokensTest, EqualIdsGiveEqualTokensAndOthersDiffer) {
  EXPECT_EQ(SyntheticTokens(42, 16), SyntheticTokens(42, 16));
  EXPECT_NE(SyntheticTokens(42, 16), SyntheticTokens(43, 16));
  EXPECT_EQ(SyntheticTokens(42, 16).size(), 16u);
}

class EncodeTest : public ::testing::TestWithParam<EventWire> {};

TEST_P(EncodeTest, TheCoordinatorsDecoderReadsEveryField) {
  EngineStep step;
  step.cleared = true;
  step.stored = {{std::nullopt, {11, 12}}, {12, {14}}};
  step.removed = {5, 6};
  const std::string payload = EncodeEventBatch(step, 4, GetParam(), 1700000000.5);
  auto batch = coordinator::DecodeEngineEvents(
      std::span(reinterpret_cast<const uint8_t*>(payload.data()), payload.size()));
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_DOUBLE_EQ(batch->ts, 1700000000.5);
  EXPECT_EQ(batch->dp_rank, 0u);
  ASSERT_EQ(batch->events.size(), 4u);
  EXPECT_TRUE(std::holds_alternative<coordinator::EngineAllCleared>(batch->events[0]));
  const auto& first = std::get<coordinator::EngineBlockStored>(batch->events[1]);
  ASSERT_EQ(first.hashes.size(), 2u);
  EXPECT_EQ(first.hashes[1].lo, 12u);
  EXPECT_FALSE(first.parent.has_value());
  EXPECT_EQ(first.block_size, 4u);
  std::vector<uint32_t> tokens = SyntheticTokens(11, 4);
  const std::vector<uint32_t> second_block = SyntheticTokens(12, 4);
  tokens.insert(tokens.end(), second_block.begin(), second_block.end());
  EXPECT_EQ(first.tokens, tokens);
  EXPECT_EQ(first.medium, "GPU");
  const auto& second = std::get<coordinator::EngineBlockStored>(batch->events[2]);
  ASSERT_TRUE(second.parent.has_value());
  EXPECT_EQ(second.parent->lo, 12u);
  const auto& removed = std::get<coordinator::EngineBlockRemoved>(batch->events[3]);
  ASSERT_EQ(removed.hashes.size(), 2u);
  EXPECT_EQ(removed.hashes[0].lo, 5u);
}

INSTANTIATE_TEST_SUITE_P(ArrayAndMap, EncodeTest,
                         ::testing::Values(EventWire::kArray, EventWire::kMap),
                         [](const auto& info) {
                           return info.param == EventWire::kArray ? "Array" : "Map";
                         });

}  // namespace
}  // namespace kvtier::bench
