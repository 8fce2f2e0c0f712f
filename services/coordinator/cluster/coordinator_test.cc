// The coordinator's event stream rules: sequence numbers, duplicates, gaps, restarts,
// lease expiry and snapshot resync, with a fake clock; and convergence to the truth when
// events are dropped, duplicated and reordered at random. Stored events whose parent is
// missing: coordinator_parents_test.cc; routing and pools: coordinator_routing_test.cc.
#include "services/coordinator/cluster/coordinator.h"

#include <map>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "services/coordinator/cluster/testing/coordinator_fixture.h"

namespace kvtier::coordinator {
namespace {

using std::chrono::seconds;

TEST_F(CoordinatorTest, EventsApplyInSequenceAndDuplicatesAreSkipped) {
  Join("w1");
  const auto abc = Chain(1, 3);
  EXPECT_EQ(Publish("w1", 0, {Stored({abc[0], abc[1]})}).verdict, BatchVerdict::kApply);
  EXPECT_EQ(Matched(abc), 2u);
  // The same batch again (a retry): nothing changes.
  const size_t locations = coordinator_->Stats().index.locations;
  const EventAck again = Publish("w1", 0, {Stored({abc[0], abc[1]})});
  EXPECT_EQ(again.verdict, BatchVerdict::kDuplicate);
  EXPECT_EQ(again.next_sequence, 1u);
  EXPECT_EQ(coordinator_->Stats().index.locations, locations);
  // A batch overlapping what was applied: event 0 skipped, event 1 applied.
  const EventAck overlap = Publish("w1", 0, {Stored({abc[0], abc[1]}), Stored({abc[2]}, abc[1])});
  EXPECT_EQ(overlap.verdict, BatchVerdict::kApply);
  EXPECT_EQ(overlap.next_sequence, 2u);
  EXPECT_EQ(Matched(abc), 3u);
  EXPECT_EQ(coordinator_->Stats().membership.duplicate_events, 2u);
}

TEST_F(CoordinatorTest, AGapStopsTheStreamUntilASnapshot) {
  Join("w1");
  const auto abc = Chain(1, 3);
  Publish("w1", 0, {Stored({abc[0]})});
  // Event 1 was lost; event 2 arrives.
  EXPECT_EQ(Publish("w1", 2, {Stored({abc[2]}, abc[1])}).verdict, BatchVerdict::kSnapshotRequired);
  EXPECT_EQ(Publish("w1", 1, {Stored({abc[1]}, abc[0])}).verdict, BatchVerdict::kSnapshotRequired)
      << "nothing is applied while the stream waits for its snapshot";
  EXPECT_EQ(Matched(abc), 1u);
  // The snapshot says what the node really holds, as of event 3.
  ASSERT_TRUE(
      coordinator_
          ->PublishSnapshot({"w1",
                             1,
                             3,
                             {{abc[2], abc[1], 0, Tier::kGpu, 0, {}},  // children first: reordered
                              {abc[1], abc[0], 0, Tier::kGpu, 0, {}},
                              {abc[0], std::nullopt, 0, Tier::kGpu, 0, {}}}})
          .ok());
  EXPECT_EQ(Matched(abc), 3u);
  EXPECT_EQ(Publish("w1", 3, {Removed({abc[2]})}).verdict, BatchVerdict::kApply);
  EXPECT_EQ(Matched(abc), 2u);
  const MembershipStats stats = coordinator_->Stats().membership;
  EXPECT_EQ(stats.sequence_gaps, 1u);
  EXPECT_GE(stats.resyncs, 2u);  // the join and the gap
}

TEST_F(CoordinatorTest, MalformedBatchIsRefusedWholeAndChangesNothing) {
  Join("w1");
  KvEvent bad = Stored(Chain(10, 2));
  bad.retention = {{35, {}}, {101, {}}};
  Result<EventAck> ack = coordinator_->PublishEvents({"w1", 1, 0, {Stored(Chain(1, 1)), bad}});
  ASSERT_FALSE(ack.ok());
  EXPECT_EQ(ack.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ack.status().message().find("event 1"), std::string::npos) << ack.status();
  EXPECT_NE(ack.status().message().find("priority 101"), std::string::npos) << ack.status();
  EXPECT_EQ(coordinator_->Stats().index.blocks, 0u);
  EXPECT_EQ(Publish("w1", 0, {Stored(Chain(1, 1))}).verdict, BatchVerdict::kApply)
      << "sequence not advanced";
  // Unknown nodes and stale incarnations get clear errors.
  EXPECT_EQ(coordinator_->PublishEvents({"nobody", 1, 0, {}}).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(coordinator_->PublishEvents({"w1", 7, 1, {}}).status().code(),
            StatusCode::kFailedPrecondition);
}

// A stored event that repeats a key is malformed wherever its parent is. Found by
// coordinator_fuzz: one whose parent no node held was parked with the key twice, and the
// node's next event naming that key threw out of the waiting list (std::out_of_range).
TEST_F(CoordinatorTest, AStoredEventRepeatingAKeyIsRefusedWholeEvenBeforeItsParent) {
  Join("w1");
  const auto keys = Chain(20, 3);
  // Block 21 twice, under block 20, which no node holds.
  Result<EventAck> ack =
      coordinator_->PublishEvents({"w1", 1, 0, {Stored({keys[1], keys[1]}, keys[0])}});
  ASSERT_FALSE(ack.ok());
  EXPECT_EQ(ack.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ack.status().message().find("repeats a block key"), std::string::npos) << ack.status();
  EXPECT_EQ(coordinator_->Stats().waiting_blocks, 0u) << "nothing parked";
  // The node's next events name block 21 again: removed, then stored in a chain.
  EXPECT_EQ(Publish("w1", 0, {Removed({keys[1]}), Stored(keys)}).verdict, BatchVerdict::kApply);
  EXPECT_EQ(Matched(keys), 3u);
}

TEST_F(CoordinatorTest, ARestartedNodeLosesItsOldLocations) {
  Join("w1", /*incarnation=*/1);
  const auto ab = Chain(1, 2);
  Publish("w1", 0, {Stored(ab)});
  Result<RegisterResult> again =
      coordinator_->Register({"w1", NodeRole::kWorker, /*incarnation=*/2});
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->restarted);
  EXPECT_TRUE(again->snapshot_required);
  EXPECT_EQ(Matched(ab), 0u) << "the new process holds nothing it has not reported";
  EXPECT_EQ(coordinator_->PublishEvents({"w1", 1, 1, {}}).status().code(),
            StatusCode::kFailedPrecondition)
      << "events of the old incarnation are stale";
}

// Two processes under one name: while the first is connected, the second is refused, so
// the two do not take the lease from each other in turn; once the first's connection
// closes (the process died), a new incarnation is a restart and gets in.
TEST_F(CoordinatorTest, ANameHeldOnAnOpenConnectionIsRefusedToAnotherProcess) {
  auto first = coordinator_->Register(
      {.node = "s1", .role = NodeRole::kStore, .incarnation = 1, .connection = 5});
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(coordinator_->PublishSnapshot({"s1", 1, 0, {}}).ok());
  const auto ab = Chain(1, 2);
  Publish("s1", 0, {Stored(ab, std::nullopt, Tier::kHost)});

  auto second = coordinator_->Register(
      {.node = "s1", .role = NodeRole::kStore, .incarnation = 2, .connection = 6});
  ASSERT_EQ(second.status().code(), StatusCode::kAlreadyExists) << second.status();
  EXPECT_NE(second.status().message().find("\"s1\""), std::string::npos) << second.status();
  EXPECT_NE(second.status().message().find("a name of its own"), std::string::npos)
      << second.status();
  EXPECT_EQ(coordinator_->Stats().membership.name_conflicts, 1u);
  EXPECT_TRUE(coordinator_->Heartbeat("s1", first->lease_id, 0).ok())
      << "the first keeps its lease";
  EXPECT_EQ(Matched(ab), 2u) << "and its blocks";

  // The first process reconnects (same incarnation, connection 7): not a conflict.
  auto reconnected = coordinator_->Register(
      {.node = "s1", .role = NodeRole::kStore, .incarnation = 1, .connection = 7});
  ASSERT_TRUE(reconnected.ok()) << reconnected.status();
  EXPECT_FALSE(reconnected->restarted);
  coordinator_->Disconnected(5);  // its old connection: no longer what holds the name
  EXPECT_EQ(
      coordinator_
          ->Register({.node = "s1", .role = NodeRole::kStore, .incarnation = 2, .connection = 6})
          .status()
          .code(),
      StatusCode::kAlreadyExists);

  coordinator_->Disconnected(7);  // the first process died
  auto restarted = coordinator_->Register(
      {.node = "s1", .role = NodeRole::kStore, .incarnation = 2, .connection = 6});
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  EXPECT_TRUE(restarted->restarted);
  EXPECT_EQ(Matched(ab), 0u) << "the new process holds nothing it has not reported";
  EXPECT_EQ(coordinator_->Stats().membership.name_conflicts, 2u);
}

// A machine that died keeps its connection open on the coordinator's side until TCP
// gives up; its lease lapsing frees the name anyway.
TEST_F(CoordinatorTest, ANameIsFreeAgainOnceItsHoldersLeaseLapses) {
  ASSERT_TRUE(coordinator_->Register({.node = "w1", .incarnation = 1, .connection = 5}).ok());
  ASSERT_EQ(
      coordinator_->Register({.node = "w1", .incarnation = 2, .connection = 6}).status().code(),
      StatusCode::kAlreadyExists);
  clock_.Advance(seconds(11));
  coordinator_->Tick();
  EXPECT_TRUE(coordinator_->Register({.node = "w1", .incarnation = 2, .connection = 6}).ok());
}

TEST_F(CoordinatorTest, ExpiredLeaseRemovesTheNodesBlocksWithinTwoLeasePeriods) {
  const uint64_t lease1 = Join("w1");
  const uint64_t lease2 = Join("w2");
  const auto ab = Chain(1, 2);
  Publish("w1", 0, {Stored(ab)});
  Publish("w2", 0, {Stored(ab)});
  for (int i = 0; i < 3; ++i) {  // w2 keeps heartbeating, w1 went silent
    clock_.Advance(seconds(5));
    ASSERT_TRUE(coordinator_->Heartbeat("w2", lease2, 0).ok());
    coordinator_->Tick();
  }
  const LookupResult result = coordinator_->Lookup(0, ab);
  EXPECT_EQ(result.matched_blocks, 2u);
  ASSERT_EQ(result.scores.size(), 1u) << "only w2 (node id 1) still holds the prefix";
  EXPECT_EQ(result.scores[0].node, 1);
  EXPECT_EQ(coordinator_->Stats().membership.lease_expiries, 1u);
  EXPECT_EQ(coordinator_->Heartbeat("w1", lease1, 0).code(), StatusCode::kNotFound)
      << "it must register again";
}

TEST_F(CoordinatorTest, ALeavingNodesBlocksGoAtOnce) {
  const uint64_t lease = Join("s1", 1, NodeRole::kStore);
  const auto ab = Chain(1, 2);
  Publish("s1", 0, {Stored(ab, std::nullopt, Tier::kHost)});
  ASSERT_EQ(Matched(ab), 2u);
  EXPECT_EQ(coordinator_->Leave("s1", lease + 1).code(), StatusCode::kNotFound) << "another lease";
  ASSERT_TRUE(coordinator_->Leave("s1", lease).ok());
  EXPECT_EQ(Matched(ab), 0u) << "no tick, no lease expiry needed";
  EXPECT_EQ(coordinator_->Heartbeat("s1", lease, 0).code(), StatusCode::kNotFound)
      << "it must register again";
  EXPECT_EQ(coordinator_->Leave("s1", lease).code(), StatusCode::kNotFound);
}

TEST_F(CoordinatorTest, CoordinatorRestartAnswersMissesUntilSnapshotsRebuildIt) {
  const uint64_t lease = Join("w1");
  const auto abc = Chain(1, 3);
  Publish("w1", 0, {Stored(abc)});
  Restart();
  EXPECT_EQ(Matched(abc), 0u) << "an empty index misses; it never names a wrong location";
  // The node notices on its next heartbeat and rejoins with a snapshot of its holdings.
  EXPECT_EQ(coordinator_->Heartbeat("w1", lease, 0).code(), StatusCode::kNotFound);
  ASSERT_TRUE(coordinator_->Register({"w1", NodeRole::kWorker, 1}).ok());
  ASSERT_TRUE(coordinator_->PublishSnapshot({"w1", 1, 1, GpuChainBlocks(abc)}).ok());
  EXPECT_EQ(Matched(abc), 3u);
  EXPECT_EQ(Publish("w1", 1, {Removed({abc[2]})}).verdict, BatchVerdict::kApply);
}

// A store's snapshot lists every copy: block a in host memory and, promoted from there,
// still on disk; block b on disk only. Each copy is a location; removing a's host copy
// leaves its disk copy serving the prefix.
TEST_F(CoordinatorTest, ASnapshotMayNameABlockOnTwoTiersOfTheNode) {
  Join("s1", 1, NodeRole::kStore);
  const auto ab = Chain(1, 2);
  ASSERT_TRUE(coordinator_
                  ->PublishSnapshot({"s1",
                                     1,
                                     0,
                                     {{ab[0], std::nullopt, 0, Tier::kHost, 0, {}},
                                      {ab[0], std::nullopt, 0, Tier::kDisk, 0, {}},
                                      {ab[1], ab[0], 0, Tier::kDisk, 0, {}}}})
                  .ok());
  LookupResult both = coordinator_->Lookup(0, ab);
  ASSERT_EQ(both.matched_blocks, 2u);
  std::set<Tier> tiers_of_a;
  for (const Location& at : both.LocationsOf(0)) tiers_of_a.insert(at.tier);
  EXPECT_EQ(tiers_of_a, (std::set<Tier>{Tier::kHost, Tier::kDisk}));
  EXPECT_EQ(Publish("s1", 0, {Removed({ab[0]}, Tier::kHost)}).verdict, BatchVerdict::kApply);
  LookupResult disk_only = coordinator_->Lookup(0, ab);
  ASSERT_EQ(disk_only.matched_blocks, 2u);
  ASSERT_EQ(disk_only.LocationsOf(0).size(), 1u);
  EXPECT_EQ(disk_only.LocationsOf(0)[0].tier, Tier::kDisk);
}

TEST_F(CoordinatorTest, TokensInStoredEventsAndSnapshotsServePartialMatches) {
  Join("w1");
  // Blocks 1, 2 of two tokens each: (7, 8) and (9, 10).
  KvEvent stored = Stored(Chain(1, 2));
  stored.tokens = {7, 8, 9, 10};
  Publish("w1", 0, {stored});
  const std::vector<uint32_t> tail = {9};  // the prompt ends one token into block 2
  const LookupResult before = coordinator_->Lookup(0, std::vector<BlockKey>{Chain(1, 1)}, tail);
  EXPECT_EQ(before.partial.tokens, 1u);
  EXPECT_EQ(before.partial.key, Chain(2, 1)[0]);
  // A resync from a snapshot keeps them: the node lists each block's tokens.
  ASSERT_TRUE(
      coordinator_
          ->PublishSnapshot({"w1",
                             1,
                             1,
                             {{Chain(1, 1)[0], std::nullopt, 0, Tier::kGpu, 0, {}, {7, 8}},
                              {Chain(2, 1)[0], Chain(1, 1)[0], 0, Tier::kGpu, 0, {}, {9, 10}}}})
          .ok());
  const LookupResult after = coordinator_->Lookup(0, std::vector<BlockKey>{Chain(1, 1)}, tail);
  EXPECT_EQ(after.partial.tokens, 1u);
  ASSERT_EQ(after.scores.size(), 1u);
  EXPECT_EQ(after.scores[0].partial_tokens, 1u);
  // Three tokens cannot be split between two blocks: the batch is refused whole.
  KvEvent bad = Stored(Chain(20, 2));
  bad.tokens = {1, 2, 3};
  const Result<EventAck> ack =
      coordinator_->PublishEvents({"w1", 1, 1, {Stored(Chain(30, 1)), bad}});
  ASSERT_FALSE(ack.ok());
  EXPECT_NE(ack.status().message().find("3 tokens for 2 blocks"), std::string::npos)
      << ack.status();
  EXPECT_EQ(Matched(Chain(30, 1)), 0u);
}

TEST(CoordinatorConvergenceTest, DroppedDuplicatedAndReorderedEventsConverge) {
  std::mt19937_64 rng(42);
  FakeClock clock;
  CoordinatorOptions options;
  options.index.clock = &clock;
  options.membership.clock = &clock;
  std::unique_ptr<Coordinator> coordinator = *Coordinator::Create(options);
  ASSERT_TRUE(coordinator->Register({"w1", NodeRole::kWorker, 1}).ok());

  std::vector<std::vector<BlockKey>> prompts;
  for (uint64_t p = 0; p < 10; ++p) prompts.push_back(Chain(100 * p, 1 + rng() % 5));
  std::map<BlockKey, std::optional<BlockKey>> truth;  // what w1 holds, and each block's parent
  std::vector<std::pair<uint64_t, KvEvent>> sent;     // every event with its sequence number
  uint64_t next_sequence = 0;
  bool snapshot_pending = true;
  std::optional<std::pair<uint64_t, KvEvent>> delayed;
  int applied = 0, duplicates = 0, dropped = 0, snapshots = 0;
  auto snapshot = [&] {
    ++snapshots;
    NodeSnapshot s{"w1", 1, next_sequence, {}};
    for (const auto& [key, parent] : truth) s.blocks.push_back({key, parent, 0, Tier::kGpu, 0, {}});
    ASSERT_TRUE(coordinator->PublishSnapshot(s).ok());
    snapshot_pending = false;
  };
  for (int step = 0; step < 3000; ++step) {
    // The node changes its holdings: store a prompt prefix, or drop a leaf it holds.
    const auto& prompt = prompts[rng() % prompts.size()];
    if (rng() % 3 != 0) {
      const size_t n = 1 + rng() % prompt.size();
      std::vector<BlockKey> fresh;
      std::optional<BlockKey> parent;
      for (size_t i = 0; i < n; ++i) {
        if (!truth.count(prompt[i])) fresh.push_back(prompt[i]);
        if (fresh.empty()) parent = prompt[i];
      }
      if (fresh.empty() || (parent && !truth.count(*parent))) continue;
      for (size_t i = 0; i < fresh.size(); ++i)
        truth[fresh[i]] = i == 0 ? parent : std::optional<BlockKey>(fresh[i - 1]);
      sent.push_back({next_sequence++, Stored(fresh, parent)});
    } else {
      const BlockKey& last = prompt.back();
      const bool is_leaf =
          std::none_of(truth.begin(), truth.end(), [&](const auto& e) { return e.second == last; });
      if (!truth.count(last) || !is_leaf) continue;
      truth.erase(last);
      sent.push_back({next_sequence++, Removed({last})});
    }
    // The network delivers the newest event, or drops it, duplicates it, or holds it back
    // until after the next one (reordering).
    std::vector<std::pair<uint64_t, KvEvent>> deliver;
    switch (rng() % 10) {
      case 0: ++dropped; break;
      case 1: deliver = {sent.back(), sent.back()}; break;
      case 2:
        if (!delayed) {
          delayed = sent.back();
          break;
        }
        [[fallthrough]];
      default: deliver = {sent.back()};
    }
    if (delayed && delayed->first != sent.back().first) {
      deliver.push_back(*delayed);  // the held-back event arrives late
      delayed.reset();
    }
    for (const auto& [sequence, event] : deliver) {
      Result<EventAck> ack = coordinator->PublishEvents({"w1", 1, sequence, {event}});
      ASSERT_TRUE(ack.ok()) << ack.status();
      if (ack->verdict == BatchVerdict::kApply) ++applied;
      if (ack->verdict == BatchVerdict::kDuplicate) ++duplicates;
      if (ack->verdict == BatchVerdict::kSnapshotRequired) snapshot_pending = true;
    }
    if (snapshot_pending && rng() % 4 == 0) snapshot();  // the node answers a little later
  }
  if (snapshot_pending) snapshot();
  for (const auto& prompt : prompts) {
    size_t expected = 0;
    while (expected < prompt.size() && truth.count(prompt[expected])) ++expected;
    ASSERT_EQ(coordinator->Lookup(0, prompt).matched_blocks, expected);
  }
  EXPECT_EQ(coordinator->Stats().index.locations, truth.size());
  // The run must have exercised every path, or it proves nothing.
  EXPECT_GT(applied, 300);
  EXPECT_GT(duplicates, 10);
  EXPECT_GT(dropped, 30);
  EXPECT_GT(snapshots, 10);
  EXPECT_GT(coordinator->Stats().membership.sequence_gaps, 10u);
}

}  // namespace
}  // namespace kvtier::coordinator
