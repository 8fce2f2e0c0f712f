// The Coordinator capability over a real loopback connection: a worker registers and
// publishes events through its session; tenants look up and route through theirs. Salt
// isolation, sequence handling and bad input, end to end through the RPC layer.
#include <capnp/ez-rpc.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "common/block_key.h"
#include "services/coordinator/rpc/coordinator_node.h"
#include "services/coordinator/rpc/node_agent.h"
#include "services/coordinator/rpc/node_link.h"
#include "services/rpc/schema/kvtier.capnp.h"
#include "services/rpc/schema_convert.h"
#include "services/rpc/status_mapping.h"
#include "tests/testing/test_util.h"

namespace kvtier::coordinator {
namespace {

namespace schema = kvtier::rpc::schema;
const std::string kTokenA(40, 'a');
const std::string kTokenB(40, 'b');
const std::string kNodeToken(40, 'n');
const std::string kEngineToken(40, 'e');  // an engine acting for team-a

// One client connection (its own KJ event loop) holding a tenant's Coordinator capability.
class CoordinatorClient {
 public:
  CoordinatorClient(const std::string& address, const std::string& token,
                    const std::string& act_for = "")
      : client_(address), coordinator_(Connect(token, act_for)) {}

  template <typename Request>
  Status Send(Request request) {
    Status status;
    request.send()
        .then([](auto) {}, [&](kj::Exception&& e) { status = rpc::ExceptionToStatus(e); })
        .wait(ws());
    return status;
  }
  kj::WaitScope& ws() { return client_.getWaitScope(); }
  schema::Coordinator::Client& coordinator() { return coordinator_; }

 private:
  schema::Coordinator::Client Connect(const std::string& token, const std::string& act_for) {
    auto auth = client_.getMain<schema::Bootstrap>().authenticateRequest();
    auth.setToken(token);
    auth.setActFor(act_for);
    auto session = auth.send().wait(client_.getWaitScope()).getSession();
    return session.coordinatorRequest().send().wait(client_.getWaitScope()).getCoordinator();
  }
  capnp::EzRpcClient client_;
  schema::Coordinator::Client coordinator_;
};

// Keys `first`.. as a tenant sends them.
void SetKeys(capnp::List<schema::BlockKey>::Builder list, uint64_t first) {
  for (unsigned i = 0; i < list.size(); ++i) {
    list[i].setHi(OpaqueKeyNamespace("test", "").Key(first + i).hi);
    list[i].setLo(first + i);
  }
}

// Tenant team-a's keys as its nodes hold and announce them: in its key space (KeySalt).
struct TeamAKeys {
  BlockKey Key(uint64_t id) const {
    return KeySalt("team-a").Apply(OpaqueKeyNamespace("test", "").Key(id));
  }
};
void SetNodeKeys(capnp::List<schema::BlockKey>::Builder list, uint64_t first) {
  for (unsigned i = 0; i < list.size(); ++i) {
    const BlockKey key = TeamAKeys().Key(first + i);
    list[i].setHi(key.hi);
    list[i].setLo(key.lo);
  }
}

class CoordinatorServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorNodeOptions options;
    options.rpc.listen = {"127.0.0.1:0"};
    options.tokens = *auth::TokenStore::FromYaml(
        "tenants:\n"
        "  - {name: team-a, token: " +
            kTokenA +
            "}\n"
            "  - {name: team-b, token: " +
            kTokenB +
            "}\n"
            "engines:\n"
            "  - {name: engine, token: " +
            kEngineToken +
            ", tenants: [team-a]}\n"
            "nodes:\n"
            "  - {name: cluster-nodes, token: " +
            kNodeToken + "}\n",
        "tokens");
    options.registry = &registry_;
    node_ = *CoordinatorNode::Create(std::move(options));
    address_ = node_->endpoints()[0];
  }

  // Worker `node`'s link options: this coordinator, the node credential, incarnation 1.
  NodeLinkOptions WorkerLink(const std::string& node, const std::string& rpc_address) const {
    NodeLinkOptions options;
    options.connection.address = address_;
    options.connection.token = kNodeToken;
    options.node_id = node;
    options.role = NodeRole::kWorker;
    options.rpc_address = rpc_address;
    options.incarnation = 1;
    return options;
  }

  // Registers worker w1 and publishes 3 blocks (ids 1..3) of team-a's salt scope.
  void WorkerStoresThreeBlocksOfTeamA(CoordinatorClient& worker) {
    auto reg = worker.coordinator().registerRequest();
    auto info = reg.initNode();
    info.setNodeId("w1");
    info.setRpcAddress("10.0.0.1:7401");
    info.setIncarnation(1);
    ASSERT_TRUE(worker.Send(kj::mv(reg)).ok());
    auto snapshot = worker.coordinator().publishSnapshotRequest();
    auto s = snapshot.initSnapshot();
    s.setNodeId("w1");
    s.setIncarnation(1);
    s.setLast(true);
    ASSERT_TRUE(worker.Send(kj::mv(snapshot)).ok());
    auto publish = worker.coordinator().publishEventsRequest();
    auto batch = publish.initBatch();
    batch.setNodeId("w1");
    batch.setIncarnation(1);
    auto stored = batch.initEvents(1)[0].initStored();
    SetNodeKeys(stored.initKeys(3), 1);
    stored.setSaltScope(SaltScope("team-a"));
    stored.setPriority(50);
    auto response = publish.send().wait(worker.ws());
    ASSERT_EQ(response.getStatus(), schema::EventAckStatus::APPLIED);
    ASSERT_EQ(response.getNextSequence(), 1u);
  }

  uint32_t LookupMatched(CoordinatorClient& tenant) {
    auto request = tenant.coordinator().lookupRequest();
    SetKeys(request.initRequest().initKeys(4), 1);
    auto response = request.send().wait(tenant.ws());
    return response.getResult().getMatchedBlocks();
  }

  MetricsRegistry registry_;
  std::unique_ptr<CoordinatorNode> node_;
  std::string address_;
};

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

// A node's link carries each stored block's tokens, in events and in snapshots; a
// tenant's lookup with tail tokens gets the partially matching block back.
TEST_F(CoordinatorServiceTest, TokensFromANodesLinkServePartialMatches) {
  const TeamAKeys ns;  // the nodes announce team-a's keys
  const uint64_t scope = SaltScope("team-a");
  std::unique_ptr<NodeLink> link = *NodeLink::Connect(WorkerLink("w3", "10.0.0.3:7401"));
  ASSERT_TRUE(link->Register().ok());
  // The snapshot holds block 1 (tokens 7, 8); an event then adds block 2 (tokens 9, 10).
  NodeBlock block_1;
  block_1.key = ns.Key(1);
  block_1.first = true;
  block_1.salt_scope = scope;
  block_1.tokens = {7, 8};
  ASSERT_TRUE(link->PublishSnapshot(0, std::vector<NodeBlock>{block_1}).ok());
  NodeEvent block_2;
  block_2.key = ns.Key(2);
  block_2.parent = ns.Key(1);
  block_2.salt_scope = scope;
  block_2.tokens = {9, 10};
  ASSERT_EQ(*link->Publish(0, std::vector<NodeEvent>{block_2}), EventVerdict::kApplied);

  CoordinatorClient tenant(address_, kTokenA);
  auto first_block = [&](std::initializer_list<uint32_t> tail, uint32_t keys) {
    auto lookup = tenant.coordinator().lookupRequest();
    auto request = lookup.initRequest();
    SetKeys(request.initKeys(keys), 1);
    auto tokens = request.initPartialTokens(static_cast<unsigned>(tail.size()));
    unsigned i = 0;
    for (const uint32_t t : tail) tokens.set(i++, t);
    return lookup.send().wait(tenant.ws());
  };
  // Block 1 matched, then one token of block 2 (9, then 99 where block 2 has 10).
  auto after_block_1 = first_block({9, 99}, 1);
  auto r = after_block_1.getResult();
  EXPECT_EQ(r.getMatchedBlocks(), 1u);
  EXPECT_EQ(r.getPartialMatchTokens(), 1u);
  EXPECT_EQ(r.getPartialBlockTokens(), 2u);
  // Its key is in team-a's key space, which no client sees: its tokens and place name it.
  EXPECT_EQ(rpc::ToKey(r.getPartialBlock().getKey()), BlockKey{});
  EXPECT_EQ(std::string(r.getPartialBlock().getLocations()[0].getNodeId().cStr()), "w3");
  ASSERT_EQ(r.getScores().size(), 1u);
  EXPECT_EQ(r.getScores()[0].getPartialTokens(), 1u);
  // A prompt shorter than a block: the snapshot's tokens make block 1 the partial match.
  auto shorter = first_block({7}, 0);
  EXPECT_EQ(shorter.getResult().getPartialMatchTokens(), 1u);
  EXPECT_EQ(shorter.getResult().getPartialBlockTokens(), 2u);
  // A tail nothing begins with: asked, not matched.
  EXPECT_EQ(first_block({42}, 1).getResult().getPartialMatchTokens(), 0u);

  // Three lookups sent 2 + 1 + 1 tail tokens; two matched, 1 token each.
  const std::string metrics = registry_.Exposition();
  EXPECT_NE(metrics.find("kvtier_coordinator_lookup_tail_tokens_total 4\n"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("kvtier_coordinator_lookup_partial_matches_total 2\n"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("kvtier_coordinator_lookup_partial_tokens_total 2\n"), std::string::npos)
      << metrics;
}

// A node's link sends a chain stored block by block as one event, and removals of one
// tier as another: the coordinator counts two events, indexes every block with its own
// tokens, and the node's next batch, numbered after those two, is applied.
TEST_F(CoordinatorServiceTest, ANodesLinkSendsAChainAsOneEvent) {
  const TeamAKeys ns;  // the nodes announce team-a's keys
  std::unique_ptr<NodeLink> link = *NodeLink::Connect(WorkerLink("w4", "10.0.0.4:7401"));
  ASSERT_TRUE(link->Register().ok());
  ASSERT_TRUE(link->PublishSnapshot(0, std::vector<NodeBlock>{}).ok());
  // Blocks 1-8 of one chain (tokens 10b, 10b + 1 for block b), then 8 and 7 removed.
  std::vector<NodeEvent> events;
  for (uint64_t b = 1; b <= 8; ++b) {
    NodeEvent stored;
    stored.key = ns.Key(b);
    stored.first = b == 1;
    if (b > 1) stored.parent = ns.Key(b - 1);
    stored.salt_scope = SaltScope("team-a");
    stored.priority = 70;
    stored.tokens = {uint32_t(10 * b), uint32_t(10 * b + 1)};
    events.push_back(stored);
  }
  auto removal = [&](uint64_t b) {
    NodeEvent removed;
    removed.kind = NodeEvent::Kind::kRemoved;
    removed.key = ns.Key(b);
    return removed;
  };
  for (uint64_t b : {8, 7}) events.push_back(removal(b));
  ASSERT_EQ(WireEventCount(events), 2u);
  ASSERT_EQ(*link->Publish(0, events), EventVerdict::kApplied);
  const std::string metrics = registry_.Exposition();
  EXPECT_NE(metrics.find("kvtier_coordinator_events_total{kind=\"stored\"} 1\n"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("kvtier_coordinator_events_total{kind=\"removed\"} 1\n"),
            std::string::npos)
      << metrics;

  // Blocks 1-6 are indexed; block 6's tokens are its own (60, 61): one matches after 1-5.
  CoordinatorClient tenant(address_, kTokenA);
  auto lookup = tenant.coordinator().lookupRequest();
  auto request = lookup.initRequest();
  SetKeys(request.initKeys(8), 1);
  auto answer = lookup.send().wait(tenant.ws());
  EXPECT_EQ(answer.getResult().getMatchedBlocks(), 6u);
  auto partial = tenant.coordinator().lookupRequest();
  auto partial_request = partial.initRequest();
  SetKeys(partial_request.initKeys(5), 1);
  auto tail = partial_request.initPartialTokens(2);
  tail.set(0, 60);
  tail.set(1, 99);
  auto partial_answer = partial.send().wait(tenant.ws());
  EXPECT_EQ(partial_answer.getResult().getPartialMatchTokens(), 1u);
  EXPECT_EQ(partial_answer.getResult().getPartialBlockTokens(), 2u);

  // The next batch goes on from sequence 2: applied, not a gap.
  const std::vector<NodeEvent> next = {removal(6)};
  EXPECT_EQ(*link->Publish(2, next), EventVerdict::kApplied);
}

// On the wire a stored block joins the one before it only where it continues that chain
// like for like (the wire has one priority, retention, scope and token count an event).
TEST(JoinsWireEventTest, OnlyABlockContinuingTheChainLikeForLikeJoins) {
  const TeamAKeys ns;  // the nodes announce team-a's keys
  NodeEvent last;
  last.key = ns.Key(1);
  last.first = true;
  last.priority = 60;
  last.retention_ms = 1000;
  last.salt_scope = 7;
  last.tokens = {1, 2};
  NodeEvent next = last;
  next.key = ns.Key(2);
  next.first = false;
  next.parent = ns.Key(1);
  next.tokens = {3, 4};
  EXPECT_TRUE(JoinsWireEvent(last, next));
  const auto differs = [&](auto change) {
    NodeEvent other = next;
    change(other);
    return !JoinsWireEvent(last, other);
  };
  EXPECT_TRUE(differs([&](NodeEvent& e) { e.parent = ns.Key(9); }));
  EXPECT_TRUE(differs([](NodeEvent& e) { e.first = true; }));
  EXPECT_TRUE(differs([](NodeEvent& e) { e.priority = 61; }));
  EXPECT_TRUE(differs([](NodeEvent& e) { e.retention_ms = 0; }));
  EXPECT_TRUE(differs([](NodeEvent& e) { e.salt_scope = 8; }));
  EXPECT_TRUE(differs([](NodeEvent& e) { e.tokens.clear(); }));
  EXPECT_TRUE(differs([](NodeEvent& e) { e.tier = Tier::kHost; }));
  EXPECT_TRUE(differs([](NodeEvent& e) { e.pool = 1; }));
  EXPECT_TRUE(differs([](NodeEvent& e) { e.kind = NodeEvent::Kind::kRemoved; }));
  // Removals of one tier and pool join whatever their keys; tier changes to one tier.
  NodeEvent removed;
  removed.kind = NodeEvent::Kind::kRemoved;
  removed.key = ns.Key(5);
  NodeEvent another = removed;
  another.key = ns.Key(3);
  EXPECT_TRUE(JoinsWireEvent(removed, another));
  another.pool = 2;
  EXPECT_FALSE(JoinsWireEvent(removed, another));
  NodeEvent moved;
  moved.kind = NodeEvent::Kind::kTierChanged;
  moved.key = ns.Key(5);
  moved.to_tier = Tier::kHost;
  NodeEvent moved_too = moved;
  moved_too.key = ns.Key(6);
  EXPECT_TRUE(JoinsWireEvent(moved, moved_too));
  moved_too.to_tier = Tier::kDisk;
  EXPECT_FALSE(JoinsWireEvent(moved, moved_too));
  EXPECT_EQ(WireEventCount(std::vector<NodeEvent>{last, next, removed, another, moved, moved_too}),
            5u);
}

// A node's agent numbers its batches by the events that went on the wire: two chains
// enqueued one after the other (the second continuing the first) are applied with no
// gap, so the coordinator asks for no snapshot beyond the first.
TEST_F(CoordinatorServiceTest, ANodeAgentNumbersItsJoinedEventsWithoutGaps) {
  const TeamAKeys ns;  // the nodes announce team-a's keys
  NodeAgentOptions options;
  options.link = WorkerLink("w5", "10.0.0.5:7401");
  options.tick = std::chrono::milliseconds(10);
  options.holdings = [] { return Result<std::vector<NodeBlock>>(std::vector<NodeBlock>{}); };
  std::unique_ptr<NodeAgent> agent = NodeAgent::Start(std::move(options));
  ASSERT_TRUE(testing::WaitUntil([&] { return agent->registered(); }));
  // Blocks 1-4, then 5-8 once 1-4 are indexed.
  auto blocks = [&](uint64_t first) {
    std::vector<NodeEvent> events;
    for (uint64_t b = first; b < first + 4; ++b) {
      NodeEvent stored;
      stored.key = ns.Key(b);
      stored.first = b == 1;
      if (b > 1) stored.parent = ns.Key(b - 1);
      stored.salt_scope = SaltScope("team-a");
      events.push_back(stored);
    }
    return events;
  };
  CoordinatorClient tenant(address_, kTokenA);
  auto matched = [&] {
    auto lookup = tenant.coordinator().lookupRequest();
    SetKeys(lookup.initRequest().initKeys(8), 1);
    return lookup.send().wait(tenant.ws()).getResult().getMatchedBlocks();
  };
  agent->Enqueue(blocks(1));
  ASSERT_TRUE(testing::WaitUntil([&] { return matched() == 4; }));
  agent->Enqueue(blocks(5));
  EXPECT_TRUE(testing::WaitUntil([&] { return matched() == 8; })) << "blocks 5-8 applied after 1-4";
  const std::string metrics = registry_.Exposition();
  EXPECT_NE(metrics.find("kvtier_coordinator_sequence_gaps_total 0\n"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("kvtier_coordinator_resyncs_total 1\n"), std::string::npos)
      << "the first only: " << metrics;
  EXPECT_TRUE(agent->Stop().ok());
}

// Two node processes configured with one name: the second is refused while the first's
// connection is open (instead of the two taking the lease from each other in turn), and
// gets in as a restart once that connection closes.
TEST_F(CoordinatorServiceTest, ASecondProcessUnderALiveNodesNameIsRefusedUntilItsConnectionCloses) {
  auto link = [&](uint64_t incarnation) {
    NodeLinkOptions options;
    options.connection.address = address_;
    options.connection.token = kNodeToken;
    options.node_id = "store-a";
    options.role = NodeRole::kStore;
    options.rpc_address = "10.0.0." + std::to_string(incarnation) + ":7402";
    options.incarnation = incarnation;
    return *NodeLink::Connect(std::move(options));
  };
  std::unique_ptr<NodeLink> first = link(1);
  const Result<LinkRegistration> holder = first->Register();
  ASSERT_TRUE(holder.ok()) << holder.status();
  std::unique_ptr<NodeLink> second = link(2);
  const Result<LinkRegistration> refused = second->Register();
  ASSERT_EQ(refused.status().code(), StatusCode::kAlreadyExists) << refused.status();
  EXPECT_NE(refused.status().message().find("store-a"), std::string::npos) << refused.status();
  EXPECT_NE(registry_.Exposition().find("kvtier_coordinator_name_conflicts_total 1"),
            std::string::npos);
  EXPECT_TRUE(first->Heartbeat(holder->lease_id).ok()) << "the first keeps its lease";

  first.reset();  // its process exits: the connection closes
  Result<LinkRegistration> admitted = UnavailableError("not registered yet");
  testing::WaitUntil([&] {  // the server sees the close on its own loop
    admitted = second->Register();
    return admitted.ok();
  });
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  EXPECT_TRUE(admitted->snapshot_required) << "a restart: its holdings are asked for";
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
