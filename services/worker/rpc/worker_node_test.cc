// A worker node of its own against a coordinator over loopback, driven by the client
// SDK as an inference process would: its blocks reach the coordinator's index, Route
// names it, evicted blocks show at its store, a coordinator restart is rebuilt from its
// snapshots (the pool's listed on the worker's loop), and a drain takes it all out.
#include "services/worker/rpc/worker_node.h"

#include <gtest/gtest.h>

#include <numeric>
#include <thread>

#include "services/client/client.h"
#include "services/coordinator/rpc/coordinator_node.h"
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
  void SetUp() override { StartCoordinator(coordinator_registry_, "127.0.0.1:0"); }

  void StartCoordinator(MetricsRegistry& registry, const std::string& listen) {
    coordinator::CoordinatorNodeOptions options;
    options.rpc.listen = {listen};
    options.registry = &registry;
    options.tick_interval = 20ms;
    coordinator_ = coordinator::CoordinatorNode::Create(std::move(options)).value();
  }

  void StartWorker() {
    WorkerNodeOptions options;
    options.config.data_dir = dir_.path();
    // 2 layers x 2 KV heads x 8 dims x 4 tokens x fp16 x K,V = 512-byte blocks; four of them.
    options.config.worker = {.num_layers = 2, .num_kv_heads = 2, .head_dim = 8, .tokens_per_block = kTokensPerBlock,
                             .dtype = "fp16", .pool_bytes = 2048, .free_memory_fraction = 1.0};
    options.config.worker.listen = "127.0.0.1:0";
    options.config.store = {.host_cache_bytes = 1 << 20, .disk_bytes = 0, .disk_admission_min_count = 0};
    options.config.node.coordinator = coordinator_->endpoints()[0];
    options.registry = &worker_registry_;
    options.name = "gpu-node-0";
    options.tick = 10ms;
    node_ = WorkerNode::Create(std::move(options)).value();
    for (auto deadline = std::chrono::steady_clock::now() + 5s;
         !node_->registered() && std::chrono::steady_clock::now() < deadline;) {
      std::this_thread::sleep_for(10ms);
    }
  }

  std::unique_ptr<client::Client> Connect(const std::string& address) {
    return client::Client::Connect({.address = address, .token = "auth is off"}).value();
  }

  // "node:tier" of block 0 of `keys` at the coordinator, waiting up to 5 s for `want`.
  std::string WaitFor(const std::vector<BlockKey>& keys, const std::string& want) {
    auto coordinator = Connect(coordinator_->endpoints()[0]);
    std::string seen;
    for (auto deadline = std::chrono::steady_clock::now() + 5s; std::chrono::steady_clock::now() < deadline;) {
      auto result = coordinator->Lookup(keys);
      seen = "none";
      if (result.ok() && result->matched_blocks > 0 && !result->locations[0].empty()) {
        const client::Location& l = result->locations[0][0];
        seen = l.node_id + ":" + (l.tier == client::Tier::kGpu ? "gpu" : l.tier == client::Tier::kHost ? "host" : "disk");
      }
      if (seen == want) break;
      std::this_thread::sleep_for(10ms);
    }
    return seen;
  }

  testing::TempDir dir_;
  MetricsRegistry coordinator_registry_, worker_registry_;
  std::unique_ptr<coordinator::CoordinatorNode> coordinator_;
  std::unique_ptr<WorkerNode> node_;
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
  ASSERT_TRUE(engine->Allocate({.sequence = 2, .keys = client::Client::BlockKeys(Prompt(500, 16), kTokensPerBlock),
                                .num_tokens = 16}).ok());
  EXPECT_EQ(WaitFor(keys, "gpu-node-0/store:host"), "gpu-node-0/store:host");
  // Drained: both of the node's streams leave the cluster at once.
  ASSERT_TRUE(node_->Drain().ok());
  EXPECT_EQ(WaitFor(keys, "none"), "none");
}

TEST_F(WorkerNodeTest, ARestartedCoordinatorIsRebuiltFromThePoolsSnapshot) {
  StartWorker();
  auto engine = Connect(node_->endpoints()[0]);
  const std::vector<BlockKey> keys = client::Client::BlockKeys(Prompt(7, 8), kTokensPerBlock);
  ASSERT_TRUE(engine->Allocate({.sequence = 1, .keys = keys, .num_tokens = 8}).ok());
  ASSERT_TRUE(engine->Commit(1, keys).ok());
  ASSERT_EQ(WaitFor(keys, "gpu-node-0/worker:gpu"), "gpu-node-0/worker:gpu");
  // Same address, empty index: the worker reconnects, registers and lists its pool.
  const std::string address = coordinator_->endpoints()[0];
  coordinator_.reset();
  MetricsRegistry second_registry;
  StartCoordinator(second_registry, address);
  EXPECT_EQ(WaitFor(keys, "gpu-node-0/worker:gpu"), "gpu-node-0/worker:gpu");
  ASSERT_TRUE(node_->Drain().ok());
  coordinator_.reset();  // before its registry goes
}

}  // namespace
}  // namespace kvtier::worker
