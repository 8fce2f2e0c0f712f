// Nodes' links to the Coordinator over a real loopback connection: the tokens they send
// serve partial matches, a chain travels as one event, an agent numbers its joined events
// without gaps, and a second process under a live node's name is refused.
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

}  // namespace
}  // namespace kvtier::coordinator
