// CoordinatorMetrics turns the coordinator's cumulative stats into counters: each Update
// adds only what changed since the last one.
#include "services/coordinator/rpc/coordinator_metrics.h"

#include <gtest/gtest.h>

namespace kvtier::coordinator {
namespace {

TEST(CoordinatorMetricsTest, CountersAddWhatTheStatsGainedSinceTheLastUpdate) {
  MetricsRegistry registry;
  std::unique_ptr<CoordinatorMetrics> metrics = *CoordinatorMetrics::Create(registry);
  CoordinatorStats stats;
  stats.index.refused_full = 3;  // three stored events left out of a full index
  stats.membership.resyncs = 2;
  stats.index.evictions_by_priority[35] = 5;
  stats.adopted_blocks = 7;  // seven blocks waited for their parent and were indexed
  stats.waiting_blocks = 4;  // four wait now
  metrics->Update(stats);
  stats.index.refused_full = 4;  // one more
  stats.refused_children = 2;    // and two children of left-out blocks
  stats.adopted_blocks = 9;      // two more adopted, and one left out after its wait
  stats.orphaned_blocks = 1;
  stats.waiting_blocks = 1;
  metrics->Update(stats);
  const std::string exposition = registry.Exposition();
  EXPECT_NE(exposition.find("kvtier_coordinator_index_full_refusals_total 6\n"), std::string::npos)
      << exposition;
  EXPECT_NE(exposition.find("kvtier_coordinator_resyncs_total 2\n"), std::string::npos)
      << exposition;
  EXPECT_NE(exposition.find("kvtier_coordinator_evictions_total{priority=\"35\"} 5\n"),
            std::string::npos)
      << exposition;
  EXPECT_NE(exposition.find("kvtier_coordinator_adopted_blocks_total 9\n"), std::string::npos)
      << exposition;
  EXPECT_NE(exposition.find("kvtier_coordinator_orphaned_blocks_total 1\n"), std::string::npos)
      << exposition;
  EXPECT_NE(exposition.find("kvtier_coordinator_waiting_blocks 1\n"), std::string::npos)
      << exposition;
}

}  // namespace
}  // namespace kvtier::coordinator
