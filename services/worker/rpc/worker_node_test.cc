// A worker node of its own against a coordinator over loopback, driven by the client
// SDK as an inference process would: its blocks reach the coordinator's index, Route
// names it, evicted blocks show at its store, a coordinator restart is rebuilt from its
// snapshots (the pool's listed on the worker's loop), and a drain takes it all out.
#include "services/worker/rpc/worker_node.h"

#include <gtest/gtest.h>

#include <numeric>
#include <optional>
#include <thread>

#include "services/client/client.h"
#include "services/coordinator/rpc/coordinator_node.h"
#include "services/store/rpc/store_node.h"
#include "tests/testing/sdk_pool.h"
#include "tests/testing/test_util.h"

namespace kvtier::worker {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kTokensPerBlock = 4;

std::vector<uint32_t> Prompt(uint32_t first, uint32_t count) {
  std::vector<uint32_t> tokens(count);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

class WorkerNodeTest : public ::testing::Test {
 protected:
  void SetUp() override { StartCoordinator(coordinator_registry_, coordinator_port_.address()); }

  void StartCoordinator(MetricsRegistry& registry, const std::string& listen) {
    coordinator::CoordinatorNodeOptions options;
    options.rpc.listen = {listen};
    options.registry = &registry;
    options.tick_interval = 20ms;
    coordinator_ = coordinator::CoordinatorNode::Create(std::move(options)).value();
  }

  void StartWorker() { node_ = StartNode("gpu-node-0", dir_.path(), worker_registry_); }

  std::unique_ptr<WorkerNode> StartNode(const std::string& name, const std::string& data_dir,
                                        MetricsRegistry& registry,
                                        const std::string& write_through_store = "",
                                        std::function<void(WorkerConfig&)> configure = {}) {
    WorkerNodeOptions options;
    options.config.data_dir = data_dir;
    // 2 layers x 2 KV heads x 8 dims x 4 tokens x fp16 x K,V = 512-byte blocks; four of them.
    options.config.worker = {.num_layers = 2,
                             .num_kv_heads = 2,
                             .head_dim = 8,
                             .tokens_per_block = kTokensPerBlock,
                             .dtype = "fp16",
                             .pool_bytes = 2048,
                             .free_memory_fraction = 1.0};
    options.config.worker.listen = "127.0.0.1:0";
    options.config.worker.fetch_stream_min_block_bytes =
        0;  // this test's small blocks go on the stream too
    options.config.store = {.host_cache_bytes = 1 << 20, .disk_bytes = 0};
    if (!write_through_store.empty())
      options.config.worker.write_through_stores = {write_through_store};
    if (configure) configure(options.config.worker);
    options.config.node.coordinator = coordinator_->endpoints()[0];
    options.registry = &registry;
    options.name = name;
    options.tick = 10ms;
    std::unique_ptr<WorkerNode> node = WorkerNode::Create(std::move(options)).value();
    EXPECT_TRUE(kvtier::testing::WaitUntil([&] { return node->registered(); }))
        << name << " registered";
    return node;
  }

  std::unique_ptr<client::Client> Connect(const std::string& address) {
    return client::Client::Connect({.address = address, .token = "auth is off"}).value();
  }

  // "node:tier" of block 0 of `keys` at the coordinator, waiting up to 5 s for `want`.
  // `any`: `want` may be any of block 0's locations, not only the first (several nodes
  // index it, in the order their events arrive).
  std::string WaitFor(const std::vector<BlockKey>& keys, const std::string& want,
                      bool any = false) {
    auto coordinator = Connect(coordinator_->endpoints()[0]);
    std::string seen;
    kvtier::testing::WaitUntil([&] {
      auto result = coordinator->Lookup(keys);
      seen = "none";
      if (result.ok() && result->matched_blocks > 0) {
        for (const client::Location& l : result->locations[0]) {
          const std::string where = l.node_id + ":" +
                                    (l.tier == client::Tier::kGpu    ? "gpu"
                                     : l.tier == client::Tier::kHost ? "host"
                                                                     : "disk");
          if (seen == "none" || (any && where == want)) seen = where;
          if (!any) break;
        }
      }
      return seen == want;
    });
    return seen;
  }

  // Nodes A (node_) and B, each with an engine and its pool mapped here; both write
  // through to `write_through_store` when one is named.
  void StartTwoNodes(const std::string& write_through_store = "") {
    node_ = StartNode("node-a", dir_.path(), worker_registry_, write_through_store);
    node_b_ = StartNode("node-b", dir_b_.path(), registry_b_, write_through_store);
    ASSERT_TRUE(node_->registered() && node_b_->registered());
    engine_a_ = Connect(node_->endpoints()[0]);
    engine_b_ = Connect(node_b_->endpoints()[0]);
    auto pool_a = testing::MapWorkerPool(*engine_a_), pool_b = testing::MapWorkerPool(*engine_b_);
    ASSERT_TRUE(pool_a.ok() && pool_b.ok());
    pool_a_.emplace(std::move(*pool_a));
    pool_b_.emplace(std::move(*pool_b));
  }

  testing::TempDir dir_, dir_b_;
  // The coordinator's port, held for a test that stops it and starts one there again.
  const testing::ReservedPort coordinator_port_;
  MetricsRegistry coordinator_registry_, worker_registry_, registry_b_;
  std::unique_ptr<coordinator::CoordinatorNode> coordinator_;
  std::unique_ptr<WorkerNode> node_, node_b_;
  std::unique_ptr<client::Client> engine_a_, engine_b_;
  std::optional<client::MappedPool> pool_a_, pool_b_;
};

TEST_F(WorkerNodeTest, ItsBlocksReachTheIndexAndLeaveWithADrain) {
  StartWorker();
  ASSERT_TRUE(node_->registered());
  auto engine = Connect(node_->endpoints()[0]);
  // Blocks 0,1 computed and committed at the worker.
  const std::vector<BlockKey> keys = client::Client::BlockKeys(Prompt(10, 8), kTokensPerBlock);
  ASSERT_TRUE(engine->Allocate({.sequence = 1, .keys = keys, .num_tokens = 8}).ok());
  ASSERT_TRUE(engine->Commit(1, keys).ok());
  ASSERT_TRUE(engine->Free(1).ok());
  EXPECT_EQ(WaitFor(keys, "gpu-node-0/worker:gpu"), "gpu-node-0/worker:gpu");
  // Route names the worker and its address.
  auto route = Connect(coordinator_->endpoints()[0])->Route(keys);
  ASSERT_TRUE(route.ok()) << route.status();
  EXPECT_EQ(route->node_id, "gpu-node-0/worker");
  EXPECT_EQ(route->rpc_address, node_->endpoints()[0]);
  // A prompt of four new blocks needs the whole pool: 0,1 go down to the node's host tier.
  ASSERT_TRUE(engine
                  ->Allocate({.sequence = 2,
                              .keys = client::Client::BlockKeys(Prompt(500, 16), kTokensPerBlock),
                              .num_tokens = 16})
                  .ok());
  EXPECT_EQ(WaitFor(keys, "gpu-node-0/store:host"), "gpu-node-0/store:host");
  // Drained: both of the node's streams leave the cluster at once.
  ASSERT_TRUE(node_->Drain().ok());
  EXPECT_EQ(WaitFor(keys, "none"), "none");
}

// `kvtier worker` with per-layer windows: one pool per window, both registered, a prompt
// committed by one sequence spanning both found in each at the coordinator.
TEST_F(WorkerNodeTest, EachWindowOfTheConfigurationIsAPoolTheIndexKnows) {
  node_ = StartNode("gpu-node-0", dir_.path(), worker_registry_, "", [](WorkerConfig& w) {
    w.max_attention_window = {8, 16};
    w.sink_tokens = 4;
    w.pool_bytes = 4096;
  });
  EXPECT_NE(node_->Summary().find("worker pools 0: L1/H2/D8/T4/fp16/W8/S4 (layers 0)"),
            std::string::npos)
      << node_->Summary();
  auto engine = Connect(node_->endpoints()[0]);
  const std::vector<BlockKey> keys = client::Client::BlockKeys(Prompt(30, 8), kTokensPerBlock);
  // One sequence spans both pools: a table in each, one commit and one free for both.
  const std::vector<uint32_t> both = {0, 1};
  auto allocation =
      engine->Allocate({.sequence = 1, .pool_ids = both, .keys = keys, .num_tokens = 8});
  ASSERT_TRUE(allocation.ok()) << allocation.status();
  ASSERT_EQ(allocation->tables.size(), 2u);
  EXPECT_EQ(allocation->tables[1].pool_id, 1u);
  EXPECT_EQ(allocation->tables[1].block_ids.size(), 2u);
  ASSERT_EQ(engine->Commit(1, keys).value(), 2u);
  ASSERT_TRUE(engine->Free(1).ok());
  EXPECT_EQ(engine->LookupLocal(both, keys).value(), 2u);
  EXPECT_EQ(engine->LookupLocal(std::span<const uint32_t>(), keys).status().code(),
            StatusCode::kInvalidArgument);
  auto again = engine->Allocate({.sequence = 2, .pool_ids = both, .keys = keys, .num_tokens = 9});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->reused_blocks, 2u) << "reused in both pools";
  ASSERT_TRUE(engine->Free(2).ok());
  auto coordinator = Connect(coordinator_->endpoints()[0]);
  std::vector<uint32_t> pools;
  ASSERT_TRUE(kvtier::testing::WaitUntil([&] {
    auto result = coordinator->Lookup(keys);
    pools.clear();
    if (result.ok() && result->matched_blocks == 2) {
      for (const client::Location& l : result->locations[1]) pools.push_back(l.pool_id);
    }
    std::sort(pools.begin(), pools.end());
    return pools == std::vector<uint32_t>{0, 1};
  })) << pools.size()
      << " pools hold block 1";
  // Both pools registered: the coordinator counts every block of both as the node's.
  auto stats = engine->GetWorkerStats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->pool_layouts.size(), 2u);
  const std::string capacity =
      "kvtier_coordinator_capacity_blocks{tier=\"gpu\"} " + std::to_string(stats->total_blocks);
  EXPECT_TRUE(kvtier::testing::WaitUntil([&] {
    return coordinator_registry_.Exposition().find(capacity) != std::string::npos;
  })) << capacity
      << " in\n"
      << coordinator_registry_.Exposition();
}

TEST_F(WorkerNodeTest, ARestartedCoordinatorIsRebuiltFromThePoolsSnapshot) {
  StartWorker();
  auto engine = Connect(node_->endpoints()[0]);
  // Committed with their tokens, blocks 0,1 are partial-match candidates: a prompt of
  // block 0 and 3 tokens of block 1 matches those 3 (the event carried the tokens).
  const std::vector<uint32_t> conversation = Prompt(7, 8);
  const std::vector<BlockKey> keys = client::Client::BlockKeys(conversation, kTokensPerBlock);
  ASSERT_TRUE(engine->Allocate({.sequence = 1, .keys = keys, .num_tokens = 8}).ok());
  ASSERT_TRUE(engine->Commit(1, keys, {}, conversation).ok());
  ASSERT_EQ(WaitFor(keys, "gpu-node-0/worker:gpu"), "gpu-node-0/worker:gpu");
  auto partial_tokens = [&] {
    auto r = Connect(coordinator_->endpoints()[0])
                 ->Lookup(std::span(keys).first(1), std::span(conversation).subspan(4, 3));
    return r.ok() ? r->partial_match_tokens : 0;
  };
  EXPECT_EQ(partial_tokens(), 3u);
  // Same address, empty index: the worker reconnects, registers and lists its pool.
  coordinator_.reset();
  MetricsRegistry second_registry;
  StartCoordinator(second_registry, coordinator_port_.address());
  EXPECT_EQ(WaitFor(keys, "gpu-node-0/worker:gpu"), "gpu-node-0/worker:gpu");
  EXPECT_EQ(partial_tokens(), 3u) << "the snapshot carries each block's tokens";
  // It registered its pool's size with it.
  const std::string exposition = second_registry.Exposition();
  const std::string capacity = "kvtier_coordinator_capacity_blocks{tier=\"gpu\"} ";
  const size_t at = exposition.find(capacity);
  ASSERT_NE(at, std::string::npos) << exposition;
  EXPECT_GT(std::stod(exposition.substr(at + capacity.size())), 0.0) << exposition;
  ASSERT_TRUE(node_->Drain().ok());
  coordinator_.reset();  // before its registry goes
}

// Two worker nodes: a prefix engine A computed is onboarded by engine B over the network,
// first from A's pool, then (after A evicted it) from A's host tier; the bytes B's pool
// receives are the ones A's engine wrote.
TEST_F(WorkerNodeTest, AnotherWorkerOnboardsAPrefixFromThePoolOrTheTiersThatHoldIt) {
  StartTwoNodes();
  auto coordinator = Connect(coordinator_->endpoints()[0]);

  // Engine A computes blocks 0,1 of a prompt (bytes 0x10 and 0x11) and commits them.
  auto compute_on_a = [&](uint64_t sequence, const std::vector<BlockKey>& keys, uint8_t fill) {
    auto table = engine_a_->Allocate({.sequence = sequence,
                                      .keys = keys,
                                      .num_tokens = uint32_t(keys.size() * kTokensPerBlock)});
    ASSERT_TRUE(table.ok()) << table.status();
    for (size_t b = 0; b < keys.size(); ++b) {
      std::span<uint8_t> block = pool_a_->block(table->block_ids[b]);
      std::fill(block.begin(), block.end(), uint8_t(fill + b));
    }
    ASSERT_TRUE(engine_a_->Commit(sequence, keys).ok());
    ASSERT_TRUE(engine_a_->Free(sequence).ok());
  };
  // Engine B: lookup, allocate (nothing cached on B), onboard from the lookup's nodes.
  auto onboard_on_b = [&](uint64_t sequence, const std::vector<BlockKey>& keys, uint8_t fill) {
    auto lookup = coordinator->Lookup(keys);
    ASSERT_TRUE(lookup.ok()) << lookup.status();
    const std::vector<std::string> sources = client::Client::SourcesOf(*lookup);
    auto table = engine_b_->Allocate({.sequence = sequence,
                                      .keys = keys,
                                      .num_tokens = uint32_t(keys.size() * kTokensPerBlock)});
    ASSERT_TRUE(table.ok()) << table.status();
    EXPECT_EQ(table->reused_blocks, 0u);
    auto onboarded = engine_b_->Onboard(sequence, keys, {}, sources);
    ASSERT_TRUE(onboarded.ok()) << onboarded.status();
    EXPECT_EQ(onboarded->from_remote, keys.size()) << "sources: " << sources.size();
    EXPECT_EQ(onboarded->cached_blocks, keys.size());
    for (size_t b = 0; b < keys.size(); ++b) {
      std::span<uint8_t> block = pool_b_->block(table->block_ids[b]);
      EXPECT_EQ(std::count(block.begin(), block.end(), uint8_t(fill + b)),
                std::ptrdiff_t(block.size()))
          << "block " << b;
    }
    ASSERT_TRUE(engine_b_->Free(sequence).ok());
  };

  const std::vector<BlockKey> first = client::Client::BlockKeys(Prompt(10, 8), kTokensPerBlock);
  compute_on_a(1, first, 0x10);
  ASSERT_EQ(WaitFor(first, "node-a/worker:gpu"), "node-a/worker:gpu");
  onboard_on_b(1, first, 0x10);  // from A's pool

  // A second prefix computed on A, then pushed out of A's pool by four new blocks: it
  // now sits in A's host tier, and B onboards it from there.
  const std::vector<BlockKey> second = client::Client::BlockKeys(Prompt(300, 8), kTokensPerBlock);
  compute_on_a(2, second, 0x20);
  ASSERT_TRUE(engine_a_
                  ->Allocate({.sequence = 3,
                              .keys = client::Client::BlockKeys(Prompt(500, 16), kTokensPerBlock),
                              .num_tokens = 16})
                  .ok());
  ASSERT_EQ(WaitFor(second, "node-a/store:host"), "node-a/store:host");
  onboard_on_b(2, second, 0x20);

  // Sources that name no live node, or B itself, bring nothing: no error, no blocks.
  const std::vector<BlockKey> third = client::Client::BlockKeys(Prompt(900, 4), kTokensPerBlock);
  ASSERT_TRUE(engine_b_->Allocate({.sequence = 4, .keys = third, .num_tokens = 4}).ok());
  const std::vector<std::string> nowhere = {"no-such-node/worker", "node-b/worker"};
  auto nothing = engine_b_->Onboard(4, third, {}, nowhere);
  ASSERT_TRUE(nothing.ok()) << nothing.status();
  EXPECT_EQ(nothing->onboarded_blocks, 0u);
  // Both prefixes left A on its data stream (counted once each reply is written: a bounded wait).
  const std::string streamed = "kvtier_stream_transfers_total{op=\"get\",result=\"ok\"} 2";
  EXPECT_TRUE(kvtier::testing::WaitUntil([&] {
    return worker_registry_.Exposition().find(streamed) != std::string::npos;
  })) << worker_registry_.Exposition();
  // And landed straight in B's host pool, each of the four blocks (B's metrics as of its
  // last tick: a bounded wait).
  const std::string in_place = "kvtier_worker_onboarded_in_place_blocks_total 4";
  EXPECT_TRUE(kvtier::testing::WaitUntil([&] {
    return registry_b_.Exposition().find(in_place) != std::string::npos;
  })) << registry_b_.Exposition();
  const std::string none_held = "kvtier_worker_pool_held_blocks{pool=\"0\"} 0\n";
  EXPECT_TRUE(kvtier::testing::WaitUntil([&] {
    return registry_b_.Exposition().find(none_held) != std::string::npos;
  })) << "B's blocks held for the fetches to land in were given back: "
      << registry_b_.Exposition();
  ASSERT_TRUE(node_b_->Drain().ok());
}

// Two `kvtier worker` nodes with a pool per window (8 and 16 tokens, 4 sinks): a prompt
// engine A computed in both of its pools comes to engine B's sequence over both of B's,
// each pool's blocks from A's pool of the same window (their bytes differ by pool).
TEST_F(WorkerNodeTest, ASequenceSpanningPoolsOnboardsEachPoolFromAnotherWorker) {
  const auto windows = [](WorkerConfig& w) {
    w.max_attention_window = {8, 16};
    w.sink_tokens = 4;
    w.pool_bytes = 8192;
  };
  node_ = StartNode("node-a", dir_.path(), worker_registry_, "", windows);
  node_b_ = StartNode("node-b", dir_b_.path(), registry_b_, "", windows);
  engine_a_ = Connect(node_->endpoints()[0]);
  engine_b_ = Connect(node_b_->endpoints()[0]);
  const std::vector<uint32_t> both = {0, 1};
  std::vector<client::MappedPool> pools_a, pools_b;
  for (uint32_t pool : both) {
    pools_a.push_back(testing::MapWorkerPool(*engine_a_, pool).value());
    pools_b.push_back(testing::MapWorkerPool(*engine_b_, pool).value());
  }
  const std::vector<BlockKey> keys = client::Client::BlockKeys(Prompt(40, 12), kTokensPerBlock);
  auto a = engine_a_->Allocate({.sequence = 1, .pool_ids = both, .keys = keys, .num_tokens = 12});
  ASSERT_TRUE(a.ok()) << a.status();
  for (const client::PoolTable& table : a->tables) {
    for (size_t b = 0; b < keys.size(); ++b) {
      std::span<uint8_t> block = pools_a[table.pool_id].block(table.block_ids[b]);
      std::fill(block.begin(), block.end(), uint8_t(0x40 + 0x10 * table.pool_id + b));
    }
  }
  ASSERT_TRUE(engine_a_->Commit(1, keys).ok());
  ASSERT_TRUE(engine_a_->Free(1).ok());
  ASSERT_EQ(WaitFor(keys, "node-a/worker:gpu"), "node-a/worker:gpu");
  auto lookup = Connect(coordinator_->endpoints()[0])->Lookup(keys);
  ASSERT_TRUE(lookup.ok()) << lookup.status();
  ASSERT_FALSE(lookup->scores.empty());
  EXPECT_EQ(lookup->scores[0].prefix_blocks, 3u) << "both of A's pools serve the prompt";

  auto b = engine_b_->Allocate({.sequence = 1, .pool_ids = both, .keys = keys, .num_tokens = 13});
  ASSERT_TRUE(b.ok()) << b.status();
  auto onboarded = engine_b_->Onboard(1, keys, {}, client::Client::SourcesOf(*lookup));
  ASSERT_TRUE(onboarded.ok()) << onboarded.status();
  EXPECT_EQ(onboarded->from_remote, 2 * keys.size()) << "three blocks into each pool";
  EXPECT_EQ(onboarded->cached_blocks, keys.size());
  for (const client::PoolTable& table : b->tables) {
    for (size_t i = 0; i < keys.size(); ++i) {
      std::span<uint8_t> block = pools_b[table.pool_id].block(table.block_ids[i]);
      EXPECT_EQ(std::count(block.begin(), block.end(), uint8_t(0x40 + 0x10 * table.pool_id + i)),
                std::ptrdiff_t(block.size()))
          << "pool " << table.pool_id << " block " << i;
    }
  }
  ASSERT_TRUE(engine_b_->Free(1).ok());
}

// A worker writing through to a storage node of its own: what engine A computes reaches
// the store while A still holds it, so after A is gone (drained, as a crash would take it
// away) engine B onboards the prefix from the store, the bytes A's engine wrote.
TEST_F(WorkerNodeTest, CommittedBlocksAreWrittenThroughToAStoreNodeThatOutlivesTheWorker) {
  testing::TempDir store_dir;
  MetricsRegistry store_registry;
  store::StoreNodeOptions store_options;
  store_options.config.data_dir = store_dir.path();
  store_options.config.store = {
      .host_cache_bytes = 1 << 20, .disk_bytes = 0, .listen = "127.0.0.1:0"};
  store_options.config.node.coordinator = coordinator_->endpoints()[0];
  store_options.registry = &store_registry;
  store_options.node_id = "store-0/store";
  store_options.tick = 10ms;
  auto store_node = store::StoreNode::Create(std::move(store_options)).value();
  StartTwoNodes("store-0/store");
  auto coordinator = Connect(coordinator_->endpoints()[0]);

  // Engine A computes blocks 0,1 (bytes 0x30, 0x31) with priority 80 and commits them.
  const std::vector<BlockKey> keys = client::Client::BlockKeys(Prompt(40, 8), kTokensPerBlock);
  auto table = engine_a_->Allocate({.sequence = 1, .keys = keys, .num_tokens = 8});
  ASSERT_TRUE(table.ok()) << table.status();
  for (size_t b = 0; b < keys.size(); ++b) {
    std::span<uint8_t> block = pool_a_->block(table->block_ids[b]);
    std::fill(block.begin(), block.end(), uint8_t(0x30 + b));
  }
  const kvtier::RetentionConfig high{.ranges = {{.first_token = 0, .priority = 80}}};
  ASSERT_TRUE(engine_a_->Commit(1, keys, high).ok());
  ASSERT_TRUE(engine_a_->Free(1).ok());
  // A's pool holds them (the store may be indexed first: the write-through is quick);
  // once the store has indexed the blocks, A goes.
  ASSERT_EQ(WaitFor(keys, "node-a/worker:gpu", /*any=*/true), "node-a/worker:gpu");
  const bool stored = kvtier::testing::WaitUntil([&] {
    auto lookup = coordinator->Lookup(keys);
    if (!lookup.ok() || lookup->matched_blocks != keys.size()) return false;
    const auto& where = lookup->locations[1];
    return std::any_of(where.begin(), where.end(),
                       [](const client::Location& l) { return l.node_id == "store-0/store"; });
  });
  ASSERT_TRUE(stored) << "block 1 is indexed at the store";
  EXPECT_NE(worker_registry_.Exposition().find(
                "kvtier_worker_store_writes_blocks_total{result=\"written\"} 2"),
            std::string::npos);
  ASSERT_TRUE(node_->Drain().ok());
  ASSERT_EQ(WaitFor(keys, "store-0/store:host"), "store-0/store:host")
      << "only the store holds the prefix now";

  // Engine B finds the prefix at the store and onboards it from there.
  auto lookup = coordinator->Lookup(keys);
  ASSERT_TRUE(lookup.ok()) << lookup.status();
  auto on_b = engine_b_->Allocate({.sequence = 1, .keys = keys, .num_tokens = 8});
  ASSERT_TRUE(on_b.ok()) << on_b.status();
  auto onboarded = engine_b_->Onboard(1, keys, {}, client::Client::SourcesOf(*lookup));
  ASSERT_TRUE(onboarded.ok()) << onboarded.status();
  EXPECT_EQ(onboarded->from_remote, 2u);
  for (size_t b = 0; b < keys.size(); ++b) {
    std::span<uint8_t> block = pool_b_->block(on_b->block_ids[b]);
    EXPECT_EQ(std::count(block.begin(), block.end(), uint8_t(0x30 + b)),
              std::ptrdiff_t(block.size()))
        << "block " << b;
  }
  // B onboarded them; it does not write them through again.
  ASSERT_TRUE(engine_b_->Free(1).ok());
  ASSERT_TRUE(node_b_->Drain().ok());
  EXPECT_NE(registry_b_.Exposition().find(
                "kvtier_worker_store_writes_blocks_total{result=\"written\"} 0"),
            std::string::npos);
  ASSERT_TRUE(store_node->Drain().ok());
}

}  // namespace
}  // namespace kvtier::worker
