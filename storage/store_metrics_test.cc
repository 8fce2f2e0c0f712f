#include "storage/store_metrics.h"

#include <gtest/gtest.h>

namespace kvtier::storage {
namespace {

TEST(StoreMetricsTest, GaugesFollowTheTiersAndCountersGrowByDifference) {
  MetricsRegistry registry;
  auto metrics = StoreMetrics::Create(registry).value();
  TieredStoreStats stats;
  stats.host = TierStats{};
  stats.host->blocks = 3;
  stats.host->bytes = 3 * 65536;
  stats.host->capacity_bytes = 1 << 20;
  stats.host->hits = 5;
  stats.host->evictions_by_priority[20] = 2;
  stats.demoted = 1;
  stats.disk = TierStats{};
  stats.disk->bytes = 4 << 20;
  stats.disk->medium_bytes = 5 << 20;  // a mebibyte of dead payloads in its segments
  stats.disk->put_batches = 6;         // in 4 writes: two went with others
  stats.disk->put_writes = 4;
  metrics->Update(stats);
  // Later: two more hits, one corrupt block found, two failed reads, another eviction at 20,
  // five lent pages replaced.
  stats.host->hits = 7;
  stats.host->checksum_failures = 1;
  stats.host->io_errors = 2;
  stats.host->bytes_read = 7 * 65536;
  stats.host->evictions_by_priority[20] = 3;
  stats.host->lent_pages_replaced = 5;
  stats.disk->put_batches = 10;  // 4 more calls in 2 writes
  stats.disk->put_writes = 6;
  stats.demoted = 4;  // three more moved down, two of them by the store's own thread
  stats.demoted_ahead = 2;
  stats.onboarded = 3;  // and three left the host tier for the worker's pool
  metrics->Update(stats);
  const std::string text = registry.Exposition();
  for (const char* line :
       {"kvtier_store_blocks{tier=\"host\"} 3\n", "kvtier_store_bytes{tier=\"host\"} 196608\n",
        "kvtier_store_capacity_bytes{tier=\"host\"} 1048576\n",
        "kvtier_store_medium_bytes{tier=\"disk\"} 5242880\n",
        "kvtier_store_hits_total{tier=\"host\"} 7\n",
        "kvtier_store_checksum_failures_total{tier=\"host\"} 1\n",
        "kvtier_store_checksum_failures_total{tier=\"disk\"} 0\n",
        "kvtier_store_io_errors_total{tier=\"host\"} 2\n",
        "kvtier_store_io_errors_total{tier=\"disk\"} 0\n",
        "kvtier_store_read_bytes_total{tier=\"host\"} 458752\n",
        "kvtier_store_written_bytes_total{tier=\"disk\"} 0\n",
        "kvtier_store_evictions_total{tier=\"host\",priority=\"20\"} 3\n",
        "kvtier_store_moves_total{kind=\"demoted\"} 4\n", "kvtier_store_demoted_ahead_total 2\n",
        "kvtier_store_moves_total{kind=\"promoted\"} 0\n",
        "kvtier_store_moves_total{kind=\"onboarded\"} 3\n",
        "kvtier_store_disk_put_batches_total 10\n", "kvtier_store_disk_put_writes_total 6\n",
        "kvtier_store_host_lent_pages_replaced_total 5\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << " in\n" << text;
  }
}

}  // namespace
}  // namespace kvtier::storage
