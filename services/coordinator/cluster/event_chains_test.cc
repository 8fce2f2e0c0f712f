#include "services/coordinator/cluster/event_chains.h"

#include <gtest/gtest.h>

#include "services/coordinator/cluster/testing/coordinator_fixture.h"

namespace kvtier::coordinator {
namespace {

// One stored event for block `key` of a chain, as a node sends one a block: its parent,
// priority 60 for a minute, and `tokens` tokens.
KvEvent StoredBlock(const BlockKey& key, std::optional<BlockKey> parent, uint32_t tokens = 0,
                    uint8_t priority = 60) {
  KvEvent e = Stored({key}, parent);
  e.retention = {BlockRetention{priority, std::chrono::minutes(1)}};
  e.tokens.assign(tokens, 7);
  return e;
}

// Blocks 0-3 of a chain, stored block by block: one event carrying all four, in order,
// each block keeping its own retention and tokens.
TEST(JoinChainsTest, AChainStoredBlockByBlockIsOneEvent) {
  const std::vector<BlockKey> chain = Chain(1, 4);
  std::vector<KvEvent> events;
  for (size_t i = 0; i < chain.size(); ++i) {
    events.push_back(StoredBlock(chain[i], i == 0 ? std::nullopt : std::optional(chain[i - 1]), 4,
                                 static_cast<uint8_t>(60 + i)));
  }
  const std::vector<KvEvent> joined = JoinChains(events);
  ASSERT_EQ(joined.size(), 1u);
  EXPECT_EQ(joined[0].keys, chain);
  EXPECT_EQ(joined[0].parent, std::nullopt);
  ASSERT_EQ(joined[0].retention.size(), 4u);
  EXPECT_EQ(joined[0].retention[3].priority, 63) << "block 3 keeps its own priority";
  EXPECT_EQ(joined[0].tokens.size(), 16u);
}

// What breaks a run: a block of another chain, another tier, pool or scope, another
// token count, retention on one and not the other, and any event of another kind.
TEST(JoinChainsTest, OnlyABlockThatContinuesTheChainLikeForLikeJoinsIt) {
  const std::vector<BlockKey> chain = Chain(1, 3);
  const KvEvent first = StoredBlock(chain[0], std::nullopt, 4);
  const KvEvent next = StoredBlock(chain[1], chain[0], 4);
  EXPECT_TRUE(JoinsEvent(first, next));
  EXPECT_FALSE(JoinsEvent(first, StoredBlock(chain[2], chain[1], 4)))
      << "its parent is not the chain's last block";
  EXPECT_FALSE(JoinsEvent(first, StoredBlock(chain[1], std::nullopt, 4))) << "a chain of its own";
  KvEvent other = next;
  other.tier = Tier::kHost;
  EXPECT_FALSE(JoinsEvent(first, other));
  other = next;
  other.pool = 1;
  EXPECT_FALSE(JoinsEvent(first, other));
  other = next;
  other.scope = 9;
  EXPECT_FALSE(JoinsEvent(first, other));
  EXPECT_FALSE(JoinsEvent(first, StoredBlock(chain[1], chain[0], 0)))
      << "no tokens after 4 a block";
  other = next;
  other.retention.clear();
  EXPECT_FALSE(JoinsEvent(first, other));
  EXPECT_FALSE(JoinsEvent(first, Removed({chain[1]})));
  EXPECT_FALSE(JoinsEvent(Removed({chain[0]}), next));
  // A removal between two blocks of a chain keeps all three apart.
  EXPECT_EQ(JoinChains({first, Removed({chain[0]}), next}).size(), 3u);
}

// Removals of one tier and pool join, whatever their keys; tier changes between the same
// tiers and pools join; a cleared event joins nothing.
TEST(JoinChainsTest, RemovalsAndTierChangesLikeForLikeJoin) {
  const std::vector<BlockKey> keys = Chain(1, 4);
  const std::vector<KvEvent> removals =
      JoinChains({Removed({keys[3]}), Removed({keys[1]}), Removed({keys[2]}, Tier::kHost),
                  Removed({keys[0]}, Tier::kHost)});
  ASSERT_EQ(removals.size(), 2u);
  EXPECT_EQ(removals[0].keys, (std::vector<BlockKey>{keys[3], keys[1]}));
  EXPECT_EQ(removals[1].keys, (std::vector<BlockKey>{keys[2], keys[0]}));
  const std::vector<KvEvent> moves = JoinChains({Moved({keys[0]}, Tier::kGpu, Tier::kHost),
                                                 Moved({keys[1]}, Tier::kGpu, Tier::kHost),
                                                 Moved({keys[2]}, Tier::kGpu, Tier::kDisk)});
  ASSERT_EQ(moves.size(), 2u);
  EXPECT_EQ(moves[0].keys.size(), 2u);
  KvEvent cleared;
  cleared.kind = KvEvent::Kind::kCleared;
  EXPECT_EQ(JoinChains({cleared, cleared}).size(), 2u);
}

// Two coordinators, one given a node's events block by block and one given them joined,
// index the same: two chains stored, one partly removed, one moved to the host tier.
class JoinedEventsTest : public CoordinatorTest {};

TEST_F(JoinedEventsTest, JoinedEventsIndexWhatTheEventsTheyJoinIndex) {
  const std::vector<BlockKey> a = Chain(1, 5), b = Chain(100, 3);
  std::vector<KvEvent> events;
  for (size_t i = 0; i < a.size(); ++i)
    events.push_back(StoredBlock(a[i], i == 0 ? std::nullopt : std::optional(a[i - 1])));
  for (size_t i = 0; i < b.size(); ++i)
    events.push_back(StoredBlock(b[i], i == 0 ? std::nullopt : std::optional(b[i - 1])));
  events.push_back(Removed({a[4]}));
  events.push_back(Removed({a[3]}));
  events.push_back(Moved({b[2]}, Tier::kGpu, Tier::kHost));
  const std::vector<KvEvent> joined = JoinChains(events);
  ASSERT_EQ(joined.size(), 4u) << "a's stores, b's, the two removals, the move";

  std::vector<LookupResult> seen[2];
  const std::vector<KvEvent>* batches[] = {&events, &joined};
  for (const std::vector<KvEvent>* batch : batches) {
    Restart();
    Join("w1");
    ASSERT_EQ(Publish("w1", 0, *batch).verdict, BatchVerdict::kApply);
    EXPECT_EQ(coordinator_->Stats().waiting_blocks, 0u);
    seen[batch == &joined].push_back(coordinator_->Lookup(0, a));
    seen[batch == &joined].push_back(coordinator_->Lookup(0, b));
  }
  for (size_t q = 0; q < 2; ++q) {
    EXPECT_EQ(seen[0][q].matched_blocks, seen[1][q].matched_blocks) << "query " << q;
    ASSERT_EQ(seen[0][q].locations.size(), seen[1][q].locations.size()) << "query " << q;
    for (size_t i = 0; i < seen[0][q].locations.size(); ++i) {
      EXPECT_EQ(seen[0][q].locations[i].tier, seen[1][q].locations[i].tier)
          << "query " << q << " location " << i;
    }
  }
  EXPECT_EQ(seen[1][0].matched_blocks, 3u) << "a's blocks 0-2 are left";
  EXPECT_EQ(seen[1][1].matched_blocks, 3u);
  EXPECT_EQ(seen[1][1].LocationsOf(2)[0].tier, Tier::kHost);
}

}  // namespace
}  // namespace kvtier::coordinator
