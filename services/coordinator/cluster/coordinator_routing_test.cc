// The coordinator routes to live workers (never a store), keeps to the candidates it is
// given, counts what it routed to engines as their load, credits a reusable tail; registered pools give capacity and windows, and a
// changed window under held blocks asks for a snapshot.
#include "services/coordinator/cluster/coordinator.h"

#include <map>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "services/coordinator/cluster/testing/coordinator_fixture.h"

namespace kvtier::coordinator {
namespace {

using std::chrono::seconds;

TEST_F(CoordinatorTest, RouteChoosesALiveWorkerNeverAStore) {
  EXPECT_EQ(coordinator_->Route(0, {.keys = Chain(1, 2)}).status().code(),
            StatusCode::kUnavailable);
  Join("store-1", 1, NodeRole::kStore);
  EXPECT_EQ(coordinator_->Route(0, {.keys = Chain(1, 2)}).status().code(),
            StatusCode::kUnavailable);
  const uint64_t lease_a = Join("w-a");
  const uint64_t lease_b = Join("w-b");
  const auto prompt = Chain(1, 4);
  Publish("store-1", 0, {Stored(prompt, std::nullopt, Tier::kDisk)});
  Publish("w-b", 0, {Stored({prompt[0], prompt[1]})});
  ASSERT_TRUE(coordinator_->Heartbeat("w-a", lease_a, 0).ok());
  ASSERT_TRUE(coordinator_->Heartbeat("w-b", lease_b, 1).ok());
  Result<RouteChoice> choice = coordinator_->Route(0, {.keys = prompt});
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->prefix_blocks, 2u) << "w-b: 2 to prefill + 1 active beats w-a's 4 + 0";
}

TEST_F(CoordinatorTest, RouteKeepsToItsCandidates) {
  Join("store-1", 1, NodeRole::kStore);
  Join("w-a");
  Join("w-b");
  const auto prompt = Chain(1, 4);
  Publish("w-b", 0, {Stored(prompt)});
  // w-b holds the whole prompt, but only w-a (and names that are no live worker) may run it.
  const std::vector<std::string> only_a = {"w-gone", "store-1", "w-a"};
  Result<RouteChoice> choice = coordinator_->Route(0, {.keys = prompt, .candidates = only_a});
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->prefix_blocks, 0u);
  EXPECT_EQ(choice->cost, 4.0);
  const std::vector<std::string> no_worker = {"w-gone", "store-1"};
  const Status none = coordinator_->Route(0, {.keys = prompt, .candidates = no_worker}).status();
  EXPECT_EQ(none.code(), StatusCode::kUnavailable);
  EXPECT_NE(none.message().find("none of the 2 candidates"), std::string::npos) << none;
}

TEST_F(CoordinatorTest, ACallersCandidateLoadsReplaceTheHeartbeats) {
  Join("w-a");
  Join("w-b");
  const auto prompt = Chain(1, 2);
  Publish("w-a", 0, {Stored({prompt[0]})});
  const std::vector<std::string> both = {"w-a", "w-b"};
  // w-a prefills 1 block, w-b 2: w-a, while nothing says it is busier.
  Result<RouteChoice> idle = coordinator_->Route(0, {.keys = prompt, .candidates = both});
  ASSERT_TRUE(idle.ok()) << idle.status();
  EXPECT_EQ(coordinator_->NodeName(idle->node), "w-a");
  // The gateway has 5 blocks running on w-a: 1 + 5 against 2 + 0.
  const std::vector<uint64_t> loads = {5, 0};
  Result<RouteChoice> busy = coordinator_->Route(
      0, {.keys = prompt, .candidates = both, .candidate_active_blocks = loads});
  ASSERT_TRUE(busy.ok()) << busy.status();
  EXPECT_EQ(coordinator_->NodeName(busy->node), "w-b");
  EXPECT_DOUBLE_EQ(busy->cost, 2.0);
  const std::vector<uint64_t> one = {5};
  const Status mismatched =
      coordinator_->Route(0, {.keys = prompt, .candidates = both, .candidate_active_blocks = one})
          .status();
  EXPECT_EQ(mismatched.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(mismatched.message().find("1 candidate loads for 2 candidates"), std::string::npos)
      << mismatched;
}

// Engines report no load: without the coordinator's own count, every prompt no engine
// holds would go to the first of them.
TEST_F(CoordinatorTest, AnEnginesLoadIsWhatWasRoutedToItHalvingOverTime) {
  Join("e-a", 1, NodeRole::kEngine);
  Join("e-b", 1, NodeRole::kEngine);
  const std::vector<std::string> both = {"e-a", "e-b"};
  std::vector<std::string> went;
  for (uint64_t p = 0; p < 4; ++p) {
    const auto prompt = Chain(100 * (p + 1), 4);
    Result<RouteChoice> c = coordinator_->Route(0, {.keys = prompt, .candidates = both});
    ASSERT_TRUE(c.ok()) << c.status();
    went.push_back(coordinator_->NodeName(c->node));
  }
  EXPECT_EQ(went, (std::vector<std::string>{"e-a", "e-b", "e-a", "e-b"}));
  Result<std::vector<RouteChoice>> all =
      coordinator_->RouteAll(0, {.keys = Chain(900, 4), .candidates = both});
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ((*all)[0].active_blocks, 8u) << "two prompts of 4 blocks each";
  clock_.Advance(CoordinatorOptions{}.routed_load_half_life);
  all = coordinator_->RouteAll(0, {.keys = Chain(900, 4), .candidates = both});
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ((*all)[0].active_blocks, 4u) << "halved after a half life";
  EXPECT_EQ((*all)[1].active_blocks, 4u) << "RouteAll itself recorded nothing";
}

TEST(RoutedLoadTest, SumsRoutesHalvesThemEachHalfLifeAndForgets) {
  RoutedLoad load(seconds(2));
  load.Add(7, 8, seconds(10));
  load.Add(7, 8, seconds(12));  // 8 halved to 4, plus 8
  EXPECT_DOUBLE_EQ(load.Get(7, seconds(12)), 12.0);
  EXPECT_DOUBLE_EQ(load.Get(7, seconds(16)), 3.0);
  EXPECT_DOUBLE_EQ(load.Get(8, seconds(16)), 0.0);
  load.Forget(7);
  EXPECT_DOUBLE_EQ(load.Get(7, seconds(16)), 0.0);
  RoutedLoad off(Nanos(0));
  off.Add(7, 8, seconds(10));
  EXPECT_FALSE(off.enabled());
  EXPECT_DOUBLE_EQ(off.Get(7, seconds(10)), 0.0);
}

TEST_F(CoordinatorTest, CallersLoadsAndWorkersHeartbeatsAreNotCountedAsRoutedLoad) {
  Join("e-a", 1, NodeRole::kEngine);
  Join("e-b", 1, NodeRole::kEngine);
  const std::vector<std::string> engines = {"e-a", "e-b"};
  const std::vector<uint64_t> idle = {0, 0};
  for (uint64_t p = 0; p < 3; ++p) {
    Result<RouteChoice> c = coordinator_->Route(
        0, {.keys = Chain(100 * (p + 1), 4), .candidates = engines, .candidate_active_blocks = idle});
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(coordinator_->NodeName(c->node), "e-a") << "the gateway's loads decide";
  }
  const uint64_t lease = Join("w-a");
  Join("w-b");
  ASSERT_TRUE(coordinator_->Heartbeat("w-a", lease, 0).ok());
  const std::vector<std::string> workers = {"w-a", "w-b"};
  for (uint64_t p = 0; p < 3; ++p) {
    Result<RouteChoice> c =
        coordinator_->Route(0, {.keys = Chain(1000 * (p + 1), 4), .candidates = workers});
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(coordinator_->NodeName(c->node), "w-a") << "a worker's heartbeat is its load";
  }
}

TEST_F(CoordinatorTest, RouteCreditsAReusableTail) {
  Join("w-a");
  Join("w-b");
  // Both hold blocks 0,1; w-b also holds block 2, stored with its 4 tokens 7,8,9,10.
  const auto keys = Chain(1, 3);
  Publish("w-a", 0, {Stored({keys[0], keys[1]})});
  KvEvent with_tokens = Stored(keys);
  with_tokens.tokens = {1, 2, 3, 4, 1, 2, 3, 4, 7, 8, 9, 10};
  Publish("w-b", 0, {with_tokens});
  // The prompt: blocks 0,1 and a tail 7,8,9 that block 2 begins with. Without the tail the
  // two tie (w-a, the lower id, wins); with it w-b reuses 3 of 4 tail tokens.
  const std::span<const BlockKey> prefix(keys.data(), 2);
  Result<RouteChoice> without_tail = coordinator_->Route(0, {.keys = prefix});
  ASSERT_TRUE(without_tail.ok()) << without_tail.status();
  EXPECT_EQ(without_tail->partial_tokens, 0u);
  EXPECT_DOUBLE_EQ(without_tail->cost, 0.0);
  const std::vector<uint32_t> tail = {7, 8, 9};
  Result<RouteChoice> choice = coordinator_->Route(0, {.keys = prefix, .tail_tokens = tail});
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->partial_tokens, 3u);
  EXPECT_EQ(choice->prefix_blocks, 2u);
  EXPECT_DOUBLE_EQ(choice->cost, 0.0);
}

// A node's real holdings change at random; its events reach the coordinator dropped,
// duplicated and reordered. Whenever the coordinator asks, the node sends a snapshot of
// the truth. Once the stream is caught up, every lookup matches the truth.
TEST_F(CoordinatorTest, RegisteredPoolsGiveCapacityAndWindows) {
  // w1: GPU pool 0 full attention (100 blocks), GPU pool 1 a window of 3 blocks with one
  // sink (50 blocks); s1: a host tier of 1000 blocks.
  const std::vector<PoolInfo> w1_pools = {
      {.tier = Tier::kGpu, .pool = 0, .capacity_blocks = 100},
      {.tier = Tier::kGpu, .pool = 1, .capacity_blocks = 50, .window = {3, 1}}};
  ASSERT_TRUE(coordinator_->Register({"w1", NodeRole::kWorker, 1, w1_pools}).ok());
  ASSERT_TRUE(coordinator_->PublishSnapshot({"w1", 1, 0, {}}).ok());
  ASSERT_TRUE(
      coordinator_
          ->Register({"s1", NodeRole::kStore, 1,
                      std::vector<PoolInfo>{{.tier = Tier::kHost, .capacity_blocks = 1000}}})
          .ok());
  // Blocks 0-7 in the windowed pool; the worker evicts 1-4 (they left every window).
  const auto keys = Chain(1, 8);
  KvEvent stored = Stored(keys);
  stored.pool = 1;
  KvEvent removed = Removed({keys[1], keys[2], keys[3], keys[4]});
  removed.pool = 1;
  Publish("w1", 0, {stored, removed});
  EXPECT_EQ(Matched(keys), 8u) << "the sink and the last window serve the whole prompt";
  const CoordinatorStats stats = coordinator_->Stats();
  EXPECT_EQ(stats.capacity_blocks[0], 150u);
  EXPECT_EQ(stats.capacity_blocks[1], 1000u);
  EXPECT_EQ(stats.held_blocks[0], 4u);
}

// A pool's window in blocks: its tokens rounded up, a block per partial block, and a
// window of nearly 2^32 tokens still the 2^28 blocks it spans (not wrapped to none).
TEST(WindowOfTest, RoundsTokensUpToWholeBlocks) {
  const auto window = [](uint32_t tokens, uint32_t sinks) {
    return WindowOf(KvLayout::Create({.num_layers = 1,
                                      .num_kv_heads = 1,
                                      .head_dim = 8,
                                      .tokens_per_block = 16,
                                      .dtype = KvDtype::kFp16,
                                      .attention_window = tokens,
                                      .sink_tokens = sinks})
                        .value());
  };
  EXPECT_EQ(window(0, 0), (PoolWindow{0, 0})) << "full attention";
  EXPECT_EQ(window(4096, 4), (PoolWindow{256, 1}));
  EXPECT_EQ(window(4097, 17), (PoolWindow{257, 2}));
  EXPECT_EQ(window(0xFFFFFFF8u, 0), (PoolWindow{1u << 28, 0}));
}

TEST_F(CoordinatorTest, FullAttentionPoolDoesNotServeAcrossMissingBlocks) {
  Join("w1");  // no pools declared: full attention everywhere
  const auto keys = Chain(1, 8);
  Publish("w1", 0, {Stored(keys), Removed({keys[1], keys[2], keys[3], keys[4]})});
  EXPECT_EQ(Matched(keys), 1u);
}

TEST_F(CoordinatorTest, BadPoolsAreRefusedAndRegisterNothing) {
  const std::vector<PoolInfo> twice = {{.tier = Tier::kGpu, .pool = 0},
                                       {.tier = Tier::kGpu, .pool = 0}};
  const std::vector<PoolInfo> sinks = {{.tier = Tier::kGpu, .window = {2, 3}}};
  const std::vector<PoolInfo> tier = {{.tier = static_cast<Tier>(7)}};
  for (const auto& pools : {twice, sinks, tier}) {
    const Result<RegisterResult> r = coordinator_->Register({"w1", NodeRole::kWorker, 1, pools});
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status();
  }
  EXPECT_FALSE(coordinator_->LiveRole("w1").has_value());
  EXPECT_EQ(coordinator_->Stats().membership.live_nodes, 0u);
}

TEST_F(CoordinatorTest, AChangedWindowUnderHeldBlocksAsksForASnapshot) {
  const std::vector<PoolInfo> full = {{.tier = Tier::kGpu, .pool = 1, .capacity_blocks = 50}};
  const std::vector<PoolInfo> windowed = {
      {.tier = Tier::kGpu, .pool = 1, .capacity_blocks = 50, .window = {2, 0}}};
  ASSERT_TRUE(coordinator_->Register({"w1", NodeRole::kWorker, 1, full}).ok());
  ASSERT_TRUE(coordinator_->PublishSnapshot({"w1", 1, 0, {}}).ok());
  KvEvent stored = Stored(Chain(1, 3));
  stored.pool = 1;
  Publish("w1", 0, {stored});
  // The same process registers again (its lease is live) with another window.
  const Result<RegisterResult> again =
      coordinator_->Register({"w1", NodeRole::kWorker, 1, windowed});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->snapshot_required);
  EXPECT_EQ(Matched(Chain(1, 3)), 0u) << "its blocks left the index until the snapshot";
}

}  // namespace
}  // namespace kvtier::coordinator
