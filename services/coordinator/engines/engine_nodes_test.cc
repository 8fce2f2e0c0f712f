#include "services/coordinator/engines/engine_nodes.h"

#include <gtest/gtest.h>

#include <numeric>

#include "services/coordinator/engines/engine_blocks.h"

namespace kvtier::coordinator {
namespace {

class EngineNodesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions options;
    options.index.clock = &clock_;
    options.membership.clock = &clock_;
    options.membership.lease_ttl = std::chrono::seconds(10);
    coordinator_ = std::move(Coordinator::Create(options)).value();
    nodes_ = std::make_unique<EngineNodes>(*coordinator_, scopes_);
  }

  // The engine's blocks of `tokens`, stored from the root, as the feed hands
  // them over.
  std::vector<EngineUpdate> StoreUpdate(const std::string& node, EngineBlockMap& map,
                                        const std::vector<uint32_t>& tokens) {
    EngineBlockStored s;
    for (size_t i = 0; i < tokens.size() / 4; ++i) s.hashes.push_back({0, i + 1});
    s.tokens = tokens;
    s.block_size = 4;
    std::vector<EngineUpdate> updates(
        1, EngineUpdate{.node = node, .salt_scope = SaltScope("team-a")});
    map.Apply(s, updates[0].events);
    return updates;
  }

  // Feeds `updates`, answering snapshot requests from `map` as the feed does.
  void Feed(std::vector<EngineUpdate> updates, const EngineBlockMap& map) {
    std::vector<std::string> resync = nodes_->Apply(updates);
    for (const std::string& node : resync) {
      std::vector<EngineUpdate> snapshot(1, EngineUpdate{.kind = EngineUpdate::Kind::kSnapshot,
                                                         .node = node,
                                                         .salt_scope = SaltScope("team-a"),
                                                         .blocks = map.Snapshot()});
      EXPECT_TRUE(nodes_->Apply(snapshot).empty());
    }
  }

  uint32_t Matched(const std::vector<uint32_t>& tokens) {
    const std::optional<ScopeId> scope = scopes_.Find(SaltScope("team-a"));
    if (!scope) return 0;
    const auto keys = EnginePromptKeys(space_, tokens, {});
    return coordinator_->Lookup(*scope, keys).matched_blocks;
  }

  FakeClock clock_;
  std::unique_ptr<Coordinator> coordinator_;
  ScopeRegistry scopes_;
  std::unique_ptr<EngineNodes> nodes_;
  EngineKeySpace space_{.tenant = KeySalt("team-a"), .model = "m", .tokens_per_block = 4};
};

std::vector<uint32_t> Tokens(uint32_t n) {
  std::vector<uint32_t> t(n);
  std::iota(t.begin(), t.end(), 7);
  return t;
}

TEST_F(EngineNodesTest, AnEngineJoinsTheIndexAndIsRoutedTo) {
  EngineBlockMap map({.space = space_});
  Feed(StoreUpdate("vllm-0", map, Tokens(12)), map);
  EXPECT_EQ(Matched(Tokens(12)), 3u);
  EXPECT_EQ(coordinator_->LiveRole("vllm-0"), NodeRole::kEngine);
  EXPECT_EQ(nodes_->stats().snapshots, 1u) << "a new instance is asked for its state once";

  const auto keys = EnginePromptKeys(space_, Tokens(12), {});
  Result<RouteChoice> route =
      coordinator_->Route(*scopes_.Find(SaltScope("team-a")), {.keys = keys});
  ASSERT_TRUE(route.ok()) << route.status().ToString();
  EXPECT_EQ(coordinator_->NodeName(route->node), "vllm-0");
  EXPECT_EQ(route->prefix_blocks, 3u);

  // Later events apply in sequence, with no further snapshot.
  std::vector<EngineUpdate> removal(
      1, EngineUpdate{.node = "vllm-0", .salt_scope = SaltScope("team-a")});
  EngineBlockRemoved r;
  r.hashes = {{0, 3}};
  map.Apply(r, removal[0].events);
  Feed(std::move(removal), map);
  EXPECT_EQ(Matched(Tokens(12)), 2u);
  EXPECT_EQ(nodes_->stats().snapshots, 1u);
}

TEST_F(EngineNodesTest, LeasesAreRenewedByTickAndALeaveRemovesTheEngine) {
  EngineBlockMap map({.space = space_});
  Feed(StoreUpdate("sglang-0", map, Tokens(8)), map);
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(std::chrono::seconds(4));
    nodes_->Tick();
    coordinator_->Tick();
  }
  EXPECT_EQ(Matched(Tokens(8)), 2u) << "20 s past a 10 s lease, renewed by Tick";

  std::vector<EngineUpdate> leave(
      1, EngineUpdate{.kind = EngineUpdate::Kind::kLeave, .node = "sglang-0"});
  EXPECT_TRUE(nodes_->Apply(leave).empty());
  EXPECT_EQ(Matched(Tokens(8)), 0u);
  EXPECT_FALSE(coordinator_->LiveRole("sglang-0").has_value());
}

TEST_F(EngineNodesTest, ALapsedLeaseRegistersAgainFromASnapshot) {
  EngineBlockMap map({.space = space_});
  Feed(StoreUpdate("e", map, Tokens(8)), map);
  clock_.Advance(std::chrono::seconds(30));
  coordinator_->Tick();
  nodes_->Tick();  // finds the lease gone
  EXPECT_EQ(Matched(Tokens(8)), 0u);
  Feed(StoreUpdate("e", map, Tokens(16)), map);
  EXPECT_EQ(Matched(Tokens(16)), 4u);
  EXPECT_EQ(nodes_->stats().snapshots, 2u);
}

}  // namespace
}  // namespace kvtier::coordinator
