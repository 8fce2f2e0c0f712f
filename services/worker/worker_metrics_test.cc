#include "services/worker/worker_metrics.h"

#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <vector>

namespace kvtier::worker {
namespace {

// A worker with one pool of `blocks` blocks of 4 tokens, and one block's key and tokens.
struct OnePoolWorker {
  explicit OnePoolWorker(uint32_t blocks) {
    const KvLayout layout = KvLayout::Create({.num_layers = 1,
                                              .num_kv_heads = 1,
                                              .head_dim = 8,
                                              .tokens_per_block = 4,
                                              .dtype = KvDtype::kFp16})
                                .value();
    worker = Worker::Create({.pools = {{layout, blocks}}}).value();
    std::iota(tokens.begin(), tokens.end(), 0);
  }
  std::unique_ptr<Worker> worker;
  std::vector<uint32_t> tokens = std::vector<uint32_t>(4);
  const std::vector<BlockKey> keys = {BlockKey{9, 9}};
};

TEST(WorkerMetricsTest, TracksPoolStateReuseAndEvictions) {
  MetricsRegistry registry;
  auto metrics = WorkerMetrics::Create(registry, 1).value();
  OnePoolWorker one(2);
  auto& [worker, tokens, keys] = one;
  // One block committed and released, reused once, then evicted by a 2-block prompt.
  ASSERT_TRUE(
      worker->Allocate({.client = 1, .sequence = 1, .block_keys = keys, .tokens = tokens}).ok());
  ASSERT_TRUE(worker->Commit(1, 1, keys, tokens, {}).ok());
  ASSERT_TRUE(worker->Free(1, 1).ok());
  ASSERT_TRUE(
      worker->Allocate({.client = 1, .sequence = 2, .block_keys = keys, .tokens = tokens}).ok());
  ASSERT_TRUE(worker->Free(1, 2).ok());
  metrics->Update(worker->Stats());
  ASSERT_TRUE(worker->Allocate({.client = 1, .sequence = 3, .num_tokens = 3}).ok());
  ASSERT_TRUE(worker->Allocate({.client = 1, .sequence = 4, .num_tokens = 3}).ok());
  metrics->Update(worker->Stats());
  const std::string text = registry.Exposition();
  for (const char* line :
       {"kvtier_worker_pool_blocks{pool=\"0\",state=\"in_use\"} 2\n",
        "kvtier_worker_pool_blocks{pool=\"0\",state=\"cached\"} 0\n",
        "kvtier_worker_allocated_blocks_total{pool=\"0\"} 3\n",
        "kvtier_worker_reused_blocks_total{pool=\"0\"} 1\n",
        "kvtier_worker_evictions_total{pool=\"0\",priority=\"35\"} 1\n",
        "kvtier_worker_dropped_offloads_total 1\n", "kvtier_worker_onboarded_blocks_total 0\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << " in\n" << text;
  }
}

TEST(WorkerMetricsTest, BlocksHeldForPeersAreShownApartAndInUse) {
  MetricsRegistry registry;
  auto metrics = WorkerMetrics::Create(registry, 1).value();
  OnePoolWorker one(4);
  auto& [worker, tokens, keys] = one;
  // One block committed and freed (cached), then held by a peer's fetch.
  auto allocation =
      worker->Allocate({.client = 1, .sequence = 1, .block_keys = keys, .tokens = tokens});
  ASSERT_TRUE(allocation.ok());
  ASSERT_TRUE(worker->Commit(1, 1, keys, tokens, {}).ok());
  ASSERT_TRUE(worker->Free(1, 1).ok());
  const std::vector<BlockId> block = {allocation->block_table[0]};
  ASSERT_TRUE(worker->held().Hold(0, block).ok());
  metrics->Update(worker->Stats());
  std::string text = registry.Exposition();
  for (const char* line : {"kvtier_worker_pool_held_blocks{pool=\"0\"} 1\n",
                           "kvtier_worker_pool_blocks{pool=\"0\",state=\"in_use\"} 1\n",
                           "kvtier_worker_pool_blocks{pool=\"0\",state=\"cached\"} 0\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << " in\n" << text;
  }
  ASSERT_TRUE(worker->held().Release(0, block).ok());  // the fetch is done
  metrics->Update(worker->Stats());
  text = registry.Exposition();
  EXPECT_NE(text.find("kvtier_worker_pool_held_blocks{pool=\"0\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("kvtier_worker_pool_blocks{pool=\"0\",state=\"cached\"} 1\n"),
            std::string::npos)
      << text;
}

TEST(WorkerMetricsTest, CountsOnboardedBlocksAndBytesByGrowth) {
  MetricsRegistry registry;
  auto metrics = WorkerMetrics::Create(registry, 1).value();
  WorkerStats stats;
  stats.pools.resize(1);
  stats.onboarded_blocks = 3;
  stats.onboarded_bytes = 3 * 512;
  metrics->Update(stats);
  stats.onboarded_blocks = 5;  // two more since the last update
  stats.onboarded_bytes = 5 * 512;
  metrics->Update(stats);
  const std::string text = registry.Exposition();
  EXPECT_NE(text.find("kvtier_worker_onboarded_blocks_total 5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("kvtier_worker_onboarded_bytes_total 2560\n"), std::string::npos) << text;
}

TEST(WorkerMetricsTest, TransferTimeIsCountedInSecondsByPath) {
  MetricsRegistry registry;
  auto metrics = WorkerMetrics::Create(registry, 1).value();
  WorkerStats stats;
  stats.pools.resize(1);
  stats.offload_transfer = std::chrono::milliseconds(250);
  metrics->Update(stats);
  stats.offload_transfer = std::chrono::milliseconds(1500);  // 1.25 s more
  stats.onboard_transfer = std::chrono::milliseconds(500);
  stats.offload_store = std::chrono::milliseconds(2250);  // the victims' hand-over, on the loop
  stats.onboard_fetch = std::chrono::milliseconds(750);
  metrics->Update(stats);
  const std::string text = registry.Exposition();
  for (const char* line : {"kvtier_worker_transfer_seconds_total{op=\"offload\"} 1.5\n",
                           "kvtier_worker_transfer_seconds_total{op=\"onboard\"} 0.5\n",
                           "kvtier_worker_transfer_seconds_total{op=\"copy\"} 0\n",
                           "kvtier_worker_tier_seconds_total{op=\"offload\"} 2.25\n",
                           "kvtier_worker_tier_seconds_total{op=\"onboard\"} 0.75\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << " in\n" << text;
  }
}

TEST(WorkerMetricsTest, TracksTheOffloadStagingByGrowth) {
  MetricsRegistry registry;
  auto metrics = WorkerMetrics::Create(registry, 1).value();
  // A 64 KiB staging. 5 staged: 3 stored, 1 refused, 1 waiting (4 KiB); 2 found no room;
  // 1 read back.
  metrics->UpdateStaging({.staged = 5,
                          .stored = 3,
                          .failed = 1,
                          .no_room = 2,
                          .served = 1,
                          .staged_bytes = 4096,
                          .capacity_bytes = 65536});
  // Then 2 more staged: 2 stored, 1 read back and withdrawn, and nothing waits.
  metrics->UpdateStaging({.staged = 7,
                          .stored = 5,
                          .failed = 1,
                          .no_room = 2,
                          .served = 2,
                          .withdrawn = 1,
                          .staged_bytes = 0,
                          .capacity_bytes = 65536});
  const std::string text = registry.Exposition();
  for (const char* line :
       {"kvtier_worker_staged_offloads_total{result=\"stored\"} 5\n",
        "kvtier_worker_staged_offloads_total{result=\"failed\"} 1\n",
        "kvtier_worker_staged_offloads_total{result=\"withdrawn\"} 1\n",
        "kvtier_worker_staging_full_offloads_total 2\n", "kvtier_worker_staging_reads_total 2\n",
        "kvtier_worker_staging_bytes 0\n", "kvtier_worker_staging_capacity_bytes 65536\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << " in\n" << text;
  }
}

}  // namespace
}  // namespace kvtier::worker
