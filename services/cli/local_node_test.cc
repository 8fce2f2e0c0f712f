// `kvtier up`'s embedded worker and store, end to end over the RPC: blocks a tenant
// commits show in the coordinator's index at the worker, move to the store's host tier
// when the pool evicts them, and come back through Onboard.
#include "services/cli/local_node.h"

#include <capnp/ez-rpc.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>

#include "services/coordinator/rpc/coordinator_node.h"
#include "services/rpc/schema/kvtier.capnp.h"
#include "tests/testing/test_util.h"

namespace kvtier::cli {
namespace {

namespace schema = kvtier::rpc::schema;
using namespace std::chrono_literals;

void SetKeys(capnp::List<schema::BlockKey>::Builder keys, uint64_t first) {
  for (unsigned i = 0; i < keys.size(); ++i) {
    keys[i].setHi(0x7000);
    keys[i].setLo(first + i);
  }
}

class LocalNodeTest : public ::testing::Test {
 protected:
  // noexcept as the base's: the capabilities' destructors (kj::Own) are noexcept(false).
  ~LocalNodeTest() noexcept override = default;

  void SetUp() override {
    KvtierConfig config;
    config.data_dir = dir_.path();
    // 2 layers x 2 KV heads x 8 dims x 4 tokens x fp16 x K,V = 512-byte blocks; a pool of two
    // (all of the 1024-byte budget).
    config.worker = {.num_layers = 2,
                     .num_kv_heads = 2,
                     .head_dim = 8,
                     .tokens_per_block = 4,
                     .dtype = "fp16",
                     .pool_bytes = 1024,
                     .free_memory_fraction = 1.0,
                     .secondary_offload_min_priority = 35};
    config.store = {.host_cache_bytes = 1 << 20, .disk_bytes = 1 << 20, .disk_sync = "wal"};
    Configure(config);
    local_ = LocalNode::Create(config, "test-node", registry_).value();
    StartCoordinator(registry_);
  }

  virtual void Configure(KvtierConfig&) {}

  // A coordinator process embedding the node, and a client session with it.
  void StartCoordinator(MetricsRegistry& registry) {
    coordinator::CoordinatorNodeOptions options;
    options.rpc.listen = {"127.0.0.1:0"};
    options.registry = &registry;
    ASSERT_TRUE(local_->Embed(options, 10ms).ok());
    node_ = coordinator::CoordinatorNode::Create(std::move(options)).value();
    client_ = std::make_unique<capnp::EzRpcClient>(node_->endpoints()[0]);
    auto& wait = client_->getWaitScope();
    auto auth = client_->getMain<schema::Bootstrap>().authenticateRequest();
    auth.setToken("unused: auth is off");
    auto session = auth.send().wait(wait).getSession();
    worker_ = session.workerRequest().send().wait(wait).getWorker();
    coordinator_ = session.coordinatorRequest().send().wait(wait).getCoordinator();
    store_ = session.storeRequest().send().wait(wait).getStore();
  }

  // Sequence `id` of 8 tokens whose two blocks are keys first, first+1; returns reused blocks.
  uint32_t Allocate(uint64_t id, uint64_t first) {
    auto request = worker_->allocateRequest();
    request.setSequenceId(id);
    request.setNumTokens(8);
    SetKeys(request.initKeys(2), first);
    return request.send().wait(client_->getWaitScope()).getAllocation().getReusedBlocks();
  }
  void Commit(uint64_t id, uint64_t first) {
    auto request = worker_->commitRequest();
    request.setSequenceId(id);
    SetKeys(request.initKeys(2), first);
    request.send().wait(client_->getWaitScope());
  }
  void Free(uint64_t id) {
    auto request = worker_->freeRequest();
    request.setSequenceId(id);
    request.send().wait(client_->getWaitScope());
  }

  // "node:tier" of every location of the two blocks from `first`, waiting up to 5 s until
  // `done` accepts it (by default: equal to `expected`).
  std::string WaitForLocations(uint64_t first, const std::string& expected,
                               std::function<bool(const std::string&)> done = nullptr,
                               unsigned count = 2) {
    if (!done) done = [&](const std::string& seen) { return seen == expected; };
    std::string seen;
    testing::WaitUntil([&] {
      auto request = coordinator_->lookupRequest();
      SetKeys(request.initRequest().initKeys(count), first);
      auto response = request.send().wait(client_->getWaitScope());  // owns what `result` reads
      auto result = response.getResult();
      seen = std::to_string(result.getMatchedBlocks()) + " matched";
      for (auto block : result.getBlocks()) {
        for (auto location : block.getLocations()) {
          seen += std::string(" ") + location.getNodeId().cStr() + ":" +
                  (location.getTier() == schema::Tier::GPU    ? "gpu"
                   : location.getTier() == schema::Tier::HOST ? "host"
                                                              : "disk");
        }
      }
      return done(seen);
    });
    return seen;
  }

  testing::TempDir dir_;
  MetricsRegistry registry_;
  MetricsRegistry restarted_registry_;  // a restarted coordinator's (outlives node_)
  std::unique_ptr<LocalNode> local_;
  std::unique_ptr<coordinator::CoordinatorNode> node_;
  std::unique_ptr<capnp::EzRpcClient> client_;
  std::optional<schema::Worker::Client> worker_;
  std::optional<schema::Coordinator::Client> coordinator_;
  std::optional<schema::BlockStore::Client> store_;
};

TEST_F(LocalNodeTest, CommittedBlocksAreIndexedOffloadedAndOnboardedBack) {
  // Blocks 0,1 computed and committed at the worker.
  EXPECT_EQ(Allocate(1, 0), 0u);
  Commit(1, 0);
  EXPECT_EQ(WaitForLocations(0, "2 matched test-node/worker:gpu test-node/worker:gpu"),
            "2 matched test-node/worker:gpu test-node/worker:gpu");
  // Counted just after the index took them (on the node's thread): a bounded wait.
  const std::string stored_events = "kvtier_coordinator_events_total{kind=\"stored\"} ";
  std::string counted;
  testing::WaitUntil([&] {
    counted = registry_.Exposition();
    return counted.find(stored_events + "0\n") == std::string::npos;
  });
  EXPECT_NE(counted.find(stored_events + "1\n"), std::string::npos)
      << "the two blocks of one chain, committed together, are one event: " << counted;
  // Blocks 5,6 need the whole pool: 0,1 (priority 35) move down to the host tier.
  Free(1);
  Allocate(2, 5);
  EXPECT_EQ(WaitForLocations(0, "2 matched test-node/store:host test-node/store:host"),
            "2 matched test-node/store:host test-node/store:host");
  // A prompt starting with 0,1 finds nothing in the pool; Onboard brings both back.
  Free(2);
  EXPECT_EQ(Allocate(3, 0), 0u);
  auto onboard = worker_->onboardRequest();
  onboard.setSequenceId(3);
  SetKeys(onboard.initKeys(2), 0);
  auto onboarded = onboard.send().wait(client_->getWaitScope());
  EXPECT_EQ(onboarded.getOnboardedBlocks(), 2u);
  EXPECT_EQ(onboarded.getFromHostBlocks(), 2u) << "both came from the host tier";
  EXPECT_EQ(onboarded.getFromDiskBlocks(), 0u);
  EXPECT_EQ(onboarded.getCachedBlocks(), 2u);
  // Each block is now in the pool, and has left the host tier (its room is for blocks no
  // pool holds).
  const std::string seen =
      WaitForLocations(0, "2 matched test-node/worker:gpu test-node/worker:gpu");
  EXPECT_EQ(seen, "2 matched test-node/worker:gpu test-node/worker:gpu");
  // The worker's and the store's metrics say the same (updated at the next tick).
  std::string text;
  testing::WaitUntil([&] {
    text = registry_.Exposition();
    return text.find("kvtier_worker_onboarded_blocks_total 2\n") != std::string::npos;
  });
  // Every role's calls are counted by method (the worker's queued to its own thread).
  for (const char* line :
       {"kvtier_worker_onboarded_blocks_total 2\n", "kvtier_worker_offloaded_blocks_total 2\n",
        "kvtier_store_hits_total{tier=\"host\"} 2\n", "kvtier_store_blocks{tier=\"host\"} 0\n",
        "kvtier_store_moves_total{kind=\"onboarded\"} 2\n",
        "kvtier_rpc_requests_total{method=\"Worker.allocate\",code=\"OK\"} 3\n",
        "kvtier_rpc_requests_total{method=\"Worker.onboard\",code=\"OK\"} 1\n",
        "kvtier_rpc_request_duration_seconds_count{method=\"Worker.commit\"} 1\n",
        "kvtier_rpc_requests_total{method=\"Coordinator.lookup\",code=\"OK\"} ",
        // 0,1 reached the store child first, after the worker's removals:
        // applied parent first, with no snapshot past the two joins.
        "kvtier_coordinator_resyncs_total 2\n", "kvtier_coordinator_orphaned_blocks_total 0\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line;
  }
  // The embedded nodes' events count as a remote node's do.
  const std::string stored = "kvtier_coordinator_events_total{kind=\"stored\"} ";
  ASSERT_NE(text.find(stored), std::string::npos) << text;
  EXPECT_GT(std::stod(text.substr(text.find(stored) + stored.size())), 0.0)
      << "no stored event was counted";
}

TEST_F(LocalNodeTest, BlocksPutIntoTheStoreAreIndexedAtTheStore) {
  // Another node pushes block 50 (a chain's first) into this node's tiers over the RPC.
  const std::vector<uint8_t> payload(512, 0x42);
  auto put = store_->putRequest();
  auto block = put.initBlocks(1)[0];
  auto header = block.initHeader();
  header.initKey().setHi(0x7000);
  header.getKey().setLo(50);
  header.setFirstInChain(true);
  header.setFormatTag("L2/H2/D8/T4/fp16/W0/S0|f0000000000000000");
  header.setChecksum(storage::PayloadChecksum(payload));
  header.setPayloadBytes(payload.size());
  header.setPriority(50);
  block.setData(kj::arrayPtr(payload.data(), payload.size()));
  EXPECT_EQ(put.send().wait(client_->getWaitScope()).getStored(), 1u);
  EXPECT_EQ(WaitForLocations(50, "1 matched test-node/store:host", nullptr, 1),
            "1 matched test-node/store:host");
}

}  // namespace
TEST_F(LocalNodeTest, ARestartedCoordinatorGetsTheWorkersBlocksBackFromItsSnapshot) {
  // Blocks 0,1 committed at the worker and indexed.
  EXPECT_EQ(Allocate(1, 0), 0u);
  Commit(1, 0);
  const std::string indexed = "2 matched test-node/worker:gpu test-node/worker:gpu";
  ASSERT_EQ(WaitForLocations(0, indexed), indexed);
  // The coordinator's process goes (the client's sequence with it; the blocks stay cached
  // in the pool) and a new one starts, knowing nothing.
  worker_.reset();
  coordinator_.reset();
  store_.reset();
  client_.reset();
  node_.reset();
  StartCoordinator(restarted_registry_);
  // The worker registers again, is asked for a snapshot, and its holdings are indexed.
  EXPECT_EQ(WaitForLocations(0, indexed), indexed);
}

// A host tier of one page (one block: pages are the layout's block size rounded up to
// 4 KiB) in front of a disk tier of one block, which, once full, admits a block only after
// two lookups of it (store.disk_admission: min-count, 2 lookups).
class LocalNodeAdmissionTest : public LocalNodeTest {
 protected:
  void Configure(KvtierConfig& config) override {
    config.store.host_cache_bytes = 4096;
    config.store.disk_bytes = 512;
    config.store.disk_admission = "min-count";
    config.store.disk_admission_min_count = 2;
  }

  uint32_t Lookup(uint64_t first) {
    auto request = coordinator_->lookupRequest();
    SetKeys(request.initRequest().initKeys(2), first);
    return request.send().wait(client_->getWaitScope()).getResult().getMatchedBlocks();
  }

  uint64_t Metric(const std::string& series) {
    const std::string text = registry_.Exposition();
    const size_t at = text.find(series + " ");
    return at == std::string::npos ? 0 : std::stoull(text.substr(at + series.size() + 1));
  }
};

TEST_F(LocalNodeAdmissionTest, OnlyBlocksLookedUpTwiceMoveDownToDisk) {
  // Blocks 0,1 committed and looked up twice; blocks 5,6 committed and never looked up.
  Allocate(1, 0);
  Commit(1, 0);
  for (int i = 0; i < 2; ++i) Lookup(0);
  Free(1);
  Allocate(2, 5);  // evicts 0,1 into the one-block host tier: one of them moves to the empty disk
  Commit(2, 5);
  Free(2);
  Allocate(
      3, 8);  // evicts 5,6: the disk is full; the host tier's block (0 or 1) may enter, 5,6 may not
  // The store's metrics show both verdicts (updated at the next tick).
  const std::string dropped = "kvtier_store_moves_total{kind=\"dropped_admission\"}";
  testing::WaitUntil([&] { return Metric(dropped) > 0; });
  EXPECT_GE(Metric(dropped), 1u) << "5 or 6, never looked up, is refused by the disk tier";
  EXPECT_GE(Metric("kvtier_store_blocks{tier=\"disk\"}"), 1u)
      << "0 or 1, looked up twice, is on disk";
  EXPECT_GE(Metric("kvtier_store_moves_total{kind=\"demoted\"}"),
            Metric("kvtier_store_blocks{tier=\"disk\"}"));
}

}  // namespace kvtier::cli
