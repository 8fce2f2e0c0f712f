// The Coordinator capability over a real loopback connection: a worker registers and
// publishes events through its session; tenants look up and route through theirs. Salt
// isolation, sequence handling and bad input, end to end through the RPC layer.
#include <gtest/gtest.h>

#include "services/coordinator/rpc/testing/coordinator_service_fixture.h"

namespace kvtier::coordinator {
namespace {

namespace schema = kvtier::rpc::schema;
using service_test::CoordinatorClient;
using service_test::CoordinatorServiceTest;
using service_test::kEngineToken;
using service_test::kNodeToken;
using service_test::kTokenA;
using service_test::kTokenB;
using service_test::SetKeys;
using service_test::SetNodeKeys;
using service_test::TeamAKeys;

TEST_F(CoordinatorServiceTest, StoredBlocksAreFoundByTheirTenantOnly) {
  {
    CoordinatorClient worker(address_, kNodeToken);
    WorkerStoresThreeBlocksOfTeamA(worker);
  }
  CoordinatorClient team_a(address_, kTokenA);
  auto request = team_a.coordinator().lookupRequest();
  SetKeys(request.initRequest().initKeys(4), 1);  // blocks 1-3 cached, block 4 new
  auto response = request.send().wait(team_a.ws());
  const auto result = response.getResult();
  EXPECT_EQ(result.getMatchedBlocks(), 3u);
  ASSERT_EQ(result.getScores().size(), 1u);
  EXPECT_EQ(std::string(result.getScores()[0].getNodeId().cStr()), "w1");
  EXPECT_EQ(result.getScores()[0].getPrefixBlocks(), 3u);
  EXPECT_EQ(result.getBlocks()[2].getLocations()[0].getTier(), schema::Tier::GPU);

  CoordinatorClient team_b(address_, kTokenB);
  EXPECT_EQ(LookupMatched(team_b), 0u) << "team-b must not see team-a's blocks";

  const std::string metrics = registry_.Exposition();
  EXPECT_NE(metrics.find("kvtier_coordinator_lookup_hit_blocks_total{tier=\"gpu\"} 3"),
            std::string::npos)
      << metrics;
  // Two lookups of 4 blocks each (team-a's and team-b's): 8 asked, 3 hit.
  EXPECT_NE(metrics.find("kvtier_coordinator_lookup_blocks_total 8\n"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("kvtier_coordinator_events_total{kind=\"stored\"} 1"), std::string::npos);
  EXPECT_NE(metrics.find("kvtier_coordinator_index_blocks 3"), std::string::npos);
  // The Stats call counts both lookups too, team-b's (a scope nobody wrote under)
  // included, for a node; a tenant sees the cluster's size only, not what others cached.
  CoordinatorClient operator_(address_, kNodeToken);
  auto stats = operator_.coordinator().statsRequest().send().wait(operator_.ws());
  EXPECT_EQ(stats.getStats().getLookups(), 2u);
  EXPECT_EQ(stats.getStats().getIndexBlocks(), 3u);
  auto seen_by_b = team_b.coordinator().statsRequest().send().wait(team_b.ws());
  EXPECT_EQ(seen_by_b.getStats().getNodes(), 1u);
  EXPECT_EQ(seen_by_b.getStats().getLookups(), 0u);
  EXPECT_EQ(seen_by_b.getStats().getIndexBlocks(), 0u);
  EXPECT_EQ(seen_by_b.getStats().getIndexBytes(), 0u);
}

TEST_F(CoordinatorServiceTest, ALookupAskingForCompactLocationsGetsThemAndNoKeys) {
  {
    CoordinatorClient worker(address_, kNodeToken);
    WorkerStoresThreeBlocksOfTeamA(worker);
  }
  CoordinatorClient team_a(address_, kTokenA);
  auto request = team_a.coordinator().lookupRequest();
  auto body = request.initRequest();
  SetKeys(body.initKeys(4), 1);  // blocks 1-3 cached on w1, block 4 new
  body.setCompactLocations(true);
  auto response = request.send().wait(team_a.ws());
  const auto result = response.getResult();
  EXPECT_EQ(result.getMatchedBlocks(), 3u);
  EXPECT_FALSE(result.hasBlocks());
  ASSERT_EQ(result.getNodes().size(), 1u);
  EXPECT_EQ(std::string(result.getNodes()[0].cStr()), "w1");
  ASSERT_EQ(result.getLocationEnds().size(), 3u);
  ASSERT_EQ(result.getLocations().size(), 3u);
  for (unsigned i = 0; i < 3; ++i) {
    EXPECT_EQ(result.getLocationEnds()[i], i + 1) << "block " << i << " has one location";
    EXPECT_EQ(result.getLocations()[i].getNode(), 0u);
    EXPECT_EQ(result.getLocations()[i].getTier(), schema::Tier::GPU);
  }
}

TEST_F(CoordinatorServiceTest, RouteNamesTheWorkerAndItsAddress) {
  CoordinatorClient worker(address_, kNodeToken);
  WorkerStoresThreeBlocksOfTeamA(worker);
  CoordinatorClient team_a(address_, kTokenA);
  auto request = team_a.coordinator().routeRequest();
  SetKeys(request.initRequest().initKeys(4), 1);
  auto response = request.send().wait(team_a.ws());  // readers point into the response: keep it
  auto decision = response.getDecision();
  EXPECT_EQ(std::string(decision.getNodeId().cStr()), "w1");
  EXPECT_EQ(std::string(decision.getRpcAddress().cStr()), "10.0.0.1:7401");
  EXPECT_EQ(decision.getPrefixBlocks(), 3u);
}

TEST_F(CoordinatorServiceTest, RouteKeepsToTheCandidatesNamed) {
  CoordinatorClient worker(address_, kNodeToken);
  WorkerStoresThreeBlocksOfTeamA(worker);
  CoordinatorClient team_a(address_, kTokenA);
  auto route_to = [&](std::initializer_list<const char*> names) {
    auto request = team_a.coordinator().routeRequest();
    auto body = request.initRequest();
    SetKeys(body.initKeys(4), 1);
    auto candidates = body.initCandidates(static_cast<unsigned>(names.size()));
    unsigned i = 0;
    for (const char* name : names) candidates.set(i++, name);
    return request;
  };
  auto response = route_to({"w9", "w1"}).send().wait(team_a.ws());
  EXPECT_EQ(std::string(response.getDecision().getNodeId().cStr()), "w1");
  const Status none = team_a.Send(route_to({"w9"}));
  EXPECT_EQ(none.code(), StatusCode::kUnavailable) << none;
  EXPECT_NE(none.message().find("none of the 1 candidates"), std::string::npos) << none;
}

// A tenant's token and an engine acting for a tenant alike: no node's call is theirs.
TEST_F(CoordinatorServiceTest, OnlyNodeCredentialsRegisterAndPublish) {
  for (const auto& [token, act_for] : {std::pair{kTokenA, ""}, std::pair{kEngineToken, "team-a"}}) {
    CoordinatorClient tenant(address_, token, act_for);
    auto reg = tenant.coordinator().registerRequest();
    auto info = reg.initNode();
    info.setNodeId("rogue");
    info.setRpcAddress("10.6.6.6:7401");
    info.setIncarnation(1);
    const Status denied = tenant.Send(kj::mv(reg));
    EXPECT_EQ(denied.code(), StatusCode::kPermissionDenied) << denied;
    EXPECT_NE(denied.message().find("node credential"), std::string::npos) << denied;
    auto publish = tenant.coordinator().publishEventsRequest();
    publish.initBatch().setNodeId("w1");
    EXPECT_EQ(tenant.Send(kj::mv(publish)).code(), StatusCode::kPermissionDenied);
    auto snapshot = tenant.coordinator().publishSnapshotRequest();
    snapshot.initSnapshot().setNodeId("w1");
    EXPECT_EQ(tenant.Send(kj::mv(snapshot)).code(), StatusCode::kPermissionDenied);
    auto heartbeat = tenant.coordinator().heartbeatRequest();
    heartbeat.setNodeId("w1");
    EXPECT_EQ(tenant.Send(kj::mv(heartbeat)).code(), StatusCode::kPermissionDenied);
    auto leave = tenant.coordinator().leaveRequest();
    leave.setNodeId("w1");
    EXPECT_EQ(tenant.Send(kj::mv(leave)).code(), StatusCode::kPermissionDenied);
  }
  CoordinatorClient node(address_, kNodeToken);
  auto stats_response = node.coordinator().statsRequest().send().wait(node.ws());
  EXPECT_EQ(stats_response.getStats().getNodes(), 0u) << "the tenants' registers changed nothing";
}

TEST_F(CoordinatorServiceTest, ResolveNodesNamesLiveNodesOnly) {
  CoordinatorClient worker(address_, kNodeToken);
  WorkerStoresThreeBlocksOfTeamA(worker);  // w1 at 10.0.0.1:7401
  CoordinatorClient team_a(address_, kTokenA);
  auto request = team_a.coordinator().resolveNodesRequest();
  auto ids = request.initNodeIds(2);
  ids.set(0, "never-registered");
  ids.set(1, "w1");
  auto response = request.send().wait(team_a.ws());
  ASSERT_EQ(response.getNodes().size(), 1u) << "an unknown node is left out";
  EXPECT_EQ(std::string(response.getNodes()[0].getNodeId().cStr()), "w1");
  EXPECT_EQ(std::string(response.getNodes()[0].getRpcAddress().cStr()), "10.0.0.1:7401");
  EXPECT_EQ(response.getNodes()[0].getRole(), schema::NodeRole::WORKER);
}

TEST_F(CoordinatorServiceTest, RegisteredPoolsCarryCapacityAndTheirWindow) {
  CoordinatorClient worker(address_, kNodeToken);
  // A pool of a bad layout (tokens per block 0) is refused, naming the pool.
  auto bad = worker.coordinator().registerRequest();
  auto bad_node = bad.initNode();
  bad_node.setNodeId("w2");
  auto bad_pool = bad_node.initCapacities(1)[0];
  bad_pool.setPoolId(3);
  bad_pool.initLayout().setNumLayers(2);
  const Status refused = worker.Send(kj::mv(bad));
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument) << refused;
  EXPECT_NE(refused.message().find("pool 3"), std::string::npos) << refused;

  // GPU pool 0: 100 blocks of a layout with a 64-token window and 16 sink tokens, 16
  // tokens per block: a window of 4 blocks, 1 sink block.
  const KvLayout layout = *KvLayout::Create({.num_layers = 2,
                                             .num_kv_heads = 2,
                                             .head_dim = 64,
                                             .tokens_per_block = 16,
                                             .attention_window = 64,
                                             .sink_tokens = 16});
  auto reg = worker.coordinator().registerRequest();
  auto info = reg.initNode();
  info.setNodeId("w2");
  info.setIncarnation(1);
  auto pool = info.initCapacities(1)[0];
  pool.setTier(schema::Tier::GPU);
  pool.setCapacityBlocks(100);
  pool.setCapacityBytes(100 * layout.bytes_per_block());
  rpc::FromLayout(layout, pool.initLayout());
  ASSERT_TRUE(worker.Send(kj::mv(reg)).ok());
  auto snapshot = worker.coordinator().publishSnapshotRequest();
  snapshot.initSnapshot().setNodeId("w2");
  snapshot.getSnapshot().setIncarnation(1);
  snapshot.getSnapshot().setLast(true);
  ASSERT_TRUE(worker.Send(kj::mv(snapshot)).ok());
  // Blocks 1-8 stored; the worker dropped 2-4 (past the window of block 8, not the sink).
  auto publish = worker.coordinator().publishEventsRequest();
  auto batch = publish.initBatch();
  batch.setNodeId("w2");
  batch.setIncarnation(1);
  auto events = batch.initEvents(2);
  auto stored = events[0].initStored();
  SetNodeKeys(stored.initKeys(8), 1);
  stored.setSaltScope(SaltScope("team-a"));
  SetNodeKeys(events[1].initRemoved().initKeys(3), 2);
  ASSERT_TRUE(worker.Send(kj::mv(publish)).ok());

  CoordinatorClient tenant(address_, kTokenA);
  auto lookup = tenant.coordinator().lookupRequest();
  SetKeys(lookup.initRequest().initKeys(8), 1);
  EXPECT_EQ(lookup.send().wait(tenant.ws()).getResult().getMatchedBlocks(), 8u)
      << "the sink and the last 4 blocks serve all 8";
  const std::string exposition = registry_.Exposition();
  EXPECT_NE(exposition.find("kvtier_coordinator_capacity_blocks{tier=\"gpu\"} 100"),
            std::string::npos)
      << exposition;
  EXPECT_NE(exposition.find("kvtier_coordinator_held_blocks{tier=\"gpu\"} 5"), std::string::npos)
      << exposition;
}

TEST_F(CoordinatorServiceTest, BadInputGetsClearErrorsAndChangesNothing) {
  CoordinatorClient worker(address_, kNodeToken);
  WorkerStoresThreeBlocksOfTeamA(worker);

  auto unknown = worker.coordinator().publishEventsRequest();
  unknown.initBatch().setNodeId("nobody");
  const Status not_found = worker.Send(kj::mv(unknown));
  EXPECT_EQ(not_found.code(), StatusCode::kNotFound) << not_found;
  EXPECT_NE(not_found.message().find("nobody"), std::string::npos);

  // w1's batch of one stored block `key` with `priority` and `retention_ms`.
  const auto stored_once = [&](uint64_t key, uint8_t priority, uint64_t retention_ms) {
    auto request = worker.coordinator().publishEventsRequest();
    auto batch = request.initBatch();
    batch.setNodeId("w1");
    batch.setIncarnation(1);
    batch.setFirstSequence(1);
    auto stored = batch.initEvents(1)[0].initStored();
    SetKeys(stored.initKeys(1), key);
    stored.setPriority(priority);
    stored.setRetentionExpiryMs(retention_ms);
    return worker.Send(kj::mv(request));
  };
  const Status invalid = stored_once(50, 101, 0);
  EXPECT_EQ(invalid.code(), StatusCode::kInvalidArgument) << invalid;
  EXPECT_NE(invalid.message().find("priority 101 is out of range [0, 100]"), std::string::npos)
      << invalid;
  // A retention past 100 years (2^63 ms once overflowed the nanosecond deadline).
  const Status too_long = stored_once(51, 80, uint64_t{1} << 63);
  EXPECT_EQ(too_long.code(), StatusCode::kInvalidArgument) << too_long;
  EXPECT_NE(too_long.message().find("retention of 9223372036854775808 ms exceeds"),
            std::string::npos)
      << too_long;

  // An eviction reported by the worker shows in the metric, by priority (stored at 50).
  auto removed = worker.coordinator().publishEventsRequest();
  auto removal = removed.initBatch();
  removal.setNodeId("w1");
  removal.setIncarnation(1);
  removal.setFirstSequence(1);
  SetNodeKeys(removal.initEvents(1)[0].initRemoved().initKeys(1), 3);
  ASSERT_TRUE(worker.Send(kj::mv(removed)).ok());
  EXPECT_NE(registry_.Exposition().find("kvtier_coordinator_evictions_total{priority=\"50\"} 1"),
            std::string::npos)
      << registry_.Exposition();

  auto stale = worker.coordinator().heartbeatRequest();
  stale.setNodeId("w1");
  stale.setLeaseId(999);
  EXPECT_EQ(worker.Send(kj::mv(stale)).code(), StatusCode::kNotFound);

  auto stats_response = worker.coordinator().statsRequest().send().wait(worker.ws());
  auto stats = stats_response.getStats();
  EXPECT_EQ(stats.getIndexBlocks(), 2u) << "only the reported eviction changed the index";
  EXPECT_EQ(stats.getNodes(), 1u);
}

}  // namespace
}  // namespace kvtier::coordinator
