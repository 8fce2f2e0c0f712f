// The coordinator's metrics (all prefixed kvtier_coordinator_):
//   lookups_total, lookup_blocks_total (blocks asked), lookup_hit_blocks_total{tier}
//   (the hit rate by tier is hit_blocks{tier} / lookup_blocks), matched_blocks (histogram),
//   lookup_duration_seconds (histogram), index_blocks, index_bytes, nodes (gauges),
//   events_total{kind}, evictions_total{priority}, sequence_gaps_total, resyncs_total,
//   lease_expiries_total.
//
// Thread safety: as common/metrics.h; updated from the coordinator's event-loop thread.
#pragma once

#include <array>
#include <memory>

#include "common/metrics.h"
#include "services/coordinator/cluster/coordinator.h"

namespace kvtier::coordinator {

class CoordinatorMetrics {
 public:
  [[nodiscard]] static Result<std::unique_ptr<CoordinatorMetrics>> Create(MetricsRegistry& registry);

  void RecordLookup(const LookupResult& result, size_t asked_blocks, double seconds);
  void RecordEvent(KvEvent::Kind kind) { events_[static_cast<int>(kind)]->Inc(); }
  // Brings gauges and the stream counters up to date with the coordinator's stats.
  void Update(const CoordinatorStats& stats);

 private:
  CoordinatorMetrics() = default;
  Counter* lookups_ = nullptr;
  Counter* lookup_blocks_ = nullptr;
  std::array<Counter*, kTierCount> hit_blocks_{};
  Histogram* matched_blocks_ = nullptr;
  Histogram* lookup_seconds_ = nullptr;
  Gauge* index_blocks_ = nullptr;
  Gauge* index_bytes_ = nullptr;
  Gauge* nodes_ = nullptr;
  std::array<Gauge*, kTierCount> capacity_blocks_{}, capacity_bytes_{}, held_blocks_{};
  std::array<Counter*, 4> events_{};
  Counter* sequence_gaps_ = nullptr;
  Counter* resyncs_ = nullptr;
  Counter* lease_expiries_ = nullptr;
  CounterFamily* evictions_ = nullptr;
  MembershipStats last_;  // what the counters already include
  std::array<uint64_t, kMaxPriority + 1> last_evictions_{};
};

}  // namespace kvtier::coordinator
