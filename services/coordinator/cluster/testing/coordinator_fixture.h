// The coordinator tests' fixture: a fresh coordinator on a fake clock, nodes joining
// with empty snapshots, event batches published and checked, and chains of test keys.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "services/coordinator/cluster/coordinator.h"

namespace kvtier::coordinator {

inline std::vector<BlockKey> Chain(uint64_t first, size_t n) {
  const OpaqueKeyNamespace ns("test", "");
  std::vector<BlockKey> keys;
  for (size_t i = 0; i < n; ++i) keys.push_back(ns.Key(first + i));
  return keys;
}

inline KvEvent EventOf(KvEvent::Kind kind, std::vector<BlockKey> keys, Tier tier) {
  KvEvent e;
  e.kind = kind;
  e.keys = std::move(keys);
  e.tier = tier;
  return e;
}

inline KvEvent Stored(std::vector<BlockKey> keys, std::optional<BlockKey> parent = std::nullopt,
                      Tier tier = Tier::kGpu) {
  KvEvent e = EventOf(KvEvent::Kind::kStored, std::move(keys), tier);
  e.parent = parent;
  return e;
}

inline KvEvent Removed(std::vector<BlockKey> keys, Tier tier = Tier::kGpu) {
  return EventOf(KvEvent::Kind::kRemoved, std::move(keys), tier);
}

inline KvEvent Moved(std::vector<BlockKey> keys, Tier from, Tier to) {
  KvEvent e = EventOf(KvEvent::Kind::kTierChanged, std::move(keys), from);
  e.to_tier = to;
  return e;
}

// A chain's blocks in a worker's GPU pool (pool 0, scope 0), root first, for a snapshot.
inline std::vector<SnapshotBlock> GpuChainBlocks(const std::vector<BlockKey>& chain) {
  std::vector<SnapshotBlock> blocks;
  for (size_t i = 0; i < chain.size(); ++i) {
    blocks.push_back({chain[i],
                      i == 0 ? std::nullopt : std::optional<BlockKey>(chain[i - 1]),
                      0,
                      Tier::kGpu,
                      0,
                      {}});
  }
  return blocks;
}

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override { Restart(); }

  // A fresh coordinator: what a coordinator restart looks like to the nodes.
  void Restart() {
    CoordinatorOptions options;
    options.index.clock = &clock_;
    options.membership.clock = &clock_;
    options.membership.lease_ttl = std::chrono::seconds(10);
    options.index.max_blocks = max_index_blocks_;
    options.orphan_wait = orphan_wait_;
    coordinator_ = *Coordinator::Create(options);
  }

  // A fresh coordinator whose index holds at most `max_blocks`.
  void RestartWithIndexLimit(size_t max_blocks) {
    max_index_blocks_ = max_blocks;
    Restart();
  }

  // Registers `node` and sends an empty snapshot, as a node with nothing cached does.
  uint64_t Join(const std::string& node, uint64_t incarnation = 1,
                NodeRole role = NodeRole::kWorker) {
    Result<RegisterResult> r = coordinator_->Register({node, role, incarnation});
    EXPECT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->snapshot_required);
    EXPECT_TRUE(coordinator_->PublishSnapshot({node, incarnation, 0, {}}).ok());
    return r->lease_id;
  }

  EventAck Publish(const std::string& node, uint64_t first, std::vector<KvEvent> events,
                   uint64_t incarnation = 1) {
    Result<EventAck> ack =
        coordinator_->PublishEvents({node, incarnation, first, std::move(events)});
    EXPECT_TRUE(ack.ok()) << ack.status();
    return ack.ok() ? *ack : EventAck{};
  }

  uint32_t Matched(const std::vector<BlockKey>& keys) {
    return coordinator_->Lookup(0, keys).matched_blocks;
  }

  // Worker w1 joins and publishes one batch, which must be applied whole (no resync);
  // returns the blocks left out as orphans once no event brought their parents in time.
  uint64_t OrphansOfOneBatch(std::vector<KvEvent> events) {
    Join("w1");
    EXPECT_EQ(Publish("w1", 0, std::move(events)).verdict, BatchVerdict::kApply);
    return OrphansOnceTheWaitIsOver();
  }

  // The orphan wait passes with no event bringing a parent: every waiting block is left
  // out. Returns the orphans counted so far.
  uint64_t OrphansOnceTheWaitIsOver() {
    clock_.Advance(orphan_wait_);
    coordinator_->Tick();
    EXPECT_EQ(coordinator_->Stats().waiting_blocks, 0u);
    return coordinator_->Stats().orphaned_blocks;
  }

  // Worker w1 and store s1 join; w1 stores `chain` and then removes it leaf first, as it
  // does when it evicts the chain and hands it to s1: nothing of it is indexed after.
  void WorkerEvictsChain(const std::vector<BlockKey>& chain) {
    Join("w1");
    Join("s1", 1, NodeRole::kStore);
    ASSERT_EQ(Publish("w1", 0, {Stored(chain)}).verdict, BatchVerdict::kApply);
    std::vector<KvEvent> removals;
    for (auto key = chain.rbegin(); key != chain.rend(); ++key) removals.push_back(Removed({*key}));
    ASSERT_EQ(Publish("w1", 1, std::move(removals)).verdict, BatchVerdict::kApply);
    ASSERT_EQ(Matched(chain), 0u);
  }

  FakeClock clock_{std::chrono::seconds(100)};
  size_t max_index_blocks_ = kMaxIndexBlocks;
  Nanos orphan_wait_ = CoordinatorOptions{}.orphan_wait;
  std::unique_ptr<Coordinator> coordinator_;
};

}  // namespace kvtier::coordinator
