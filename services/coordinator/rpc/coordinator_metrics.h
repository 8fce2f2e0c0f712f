// The coordinator's metrics (all prefixed kvtier_coordinator_):
//   lookups_total, lookup_blocks_total (blocks asked), lookup_hit_blocks_total{tier}
//   (the hit rate by tier is hit_blocks{tier} / lookup_blocks), lookup_tail_tokens_total
//   (tokens after the full blocks, sent for partial matching), lookup_partial_matches_total
//   and lookup_partial_tokens_total (lookups whose tail matched a cached block, and the
//   tokens matched: partial reuse is partial_tokens / tail_tokens), matched_blocks (histogram),
//   lookup_duration_seconds (histogram), index_blocks, index_bytes, nodes (gauges),
//   events_total{kind}, evictions_total{priority}, sequence_gaps_total, resyncs_total,
//   lease_expiries_total, name_conflicts_total (registrations refused because another
//   live node holds the name), index_full_refusals_total (stored events left out
//   because the index holds coordinator.max_index_blocks, or because their parent was),
//   orphaned_blocks_total (stored blocks left out because no node held their parent, nor
//   brought it within coordinator's orphan wait), adopted_blocks_total (those indexed once
//   their parent came) and waiting_blocks (a gauge: those waiting now).
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
  [[nodiscard]] static Result<std::unique_ptr<CoordinatorMetrics>> Create(
      MetricsRegistry& registry);

  // What one lookup asked: its full blocks and the tokens after them.
  struct Asked {
    size_t blocks = 0;
    size_t tail_tokens = 0;
  };
  void RecordLookup(const LookupResult& result, Asked asked, double seconds);
  // Lookups recorded so far (the Stats RPC's count: the metric is its one counter).
  uint64_t lookups() const { return static_cast<uint64_t>(lookups_->Value()); }
  void RecordEvent(KvEvent::Kind kind) { events_[static_cast<int>(kind)]->Inc(); }
  // Brings gauges and the stream counters up to date with the coordinator's stats.
  void Update(const CoordinatorStats& stats);

 private:
  CoordinatorMetrics() = default;
  // Each registers a group of the metrics above and keeps their children.
  [[nodiscard]] Status AddLookups(MetricsRegistry& registry);
  [[nodiscard]] Status AddIndex(MetricsRegistry& registry);
  [[nodiscard]] Status AddEvents(MetricsRegistry& registry);
  Counter* lookups_ = nullptr;
  Counter* lookup_blocks_ = nullptr;
  std::array<Counter*, kTierCount> hit_blocks_{};
  Counter* tail_tokens_ = nullptr;
  Counter* partial_matches_ = nullptr;
  Counter* partial_tokens_ = nullptr;
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
  Counter* name_conflicts_ = nullptr;
  Counter* index_full_refusals_ = nullptr;
  Counter* orphaned_blocks_ = nullptr;
  Counter* adopted_blocks_ = nullptr;
  Gauge* waiting_blocks_ = nullptr;
  CounterFamily* evictions_ = nullptr;
  MembershipStats last_;  // what the counters already include
  std::array<uint64_t, kMaxPriority + 1> last_evictions_{};
  uint64_t last_refused_full_ = 0;
  uint64_t last_orphaned_ = 0;
  uint64_t last_adopted_ = 0;
};

}  // namespace kvtier::coordinator
