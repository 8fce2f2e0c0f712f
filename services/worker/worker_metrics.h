// The worker's metrics (all prefixed kvtier_worker_), per pool (label `pool`):
//   pool_blocks{pool,state}         gauge: free, cached (reusable) and in_use blocks
//   pool_held_blocks{pool}          gauge: blocks held for transfers off the loop (in_use counts
//   them) allocated_blocks_total{pool}    blank blocks handed out reused_blocks_total{pool} full
//   blocks found cached at allocation partial_reuses_total{pool,how}  partial reuse in place or by
//   copy evictions_total{pool,priority}  blocks evicted, by their priority offloaded_blocks_total,
//   offloaded_bytes_total, dropped_offloads_total onboarded_blocks_total, onboarded_bytes_total,
//   onboarded_in_place_blocks_total (fetched
//                                   from other nodes straight into a host pool)
//   transfer_seconds_total{op}      time moving pool bytes: offload, onboard, copy (the
//                                   kernels and their waits on a GPU)
//   tier_seconds_total{op}          time on the worker's loop in its tiers: offload (victims
//                                   handed over), onboard (blocks fetched before landing)
// and of its offload staging (worker.offload_staging_bytes, offload_queue.h), unlabelled:
//   staged_offloads_total{result}   staged blocks since stored by the staging's thread,
//                                   refused by the store, or dropped unstored once fetched
//                                   back into a pool (result: stored, failed, withdrawn)
//   staging_full_offloads_total     blocks the staging had no room for (the allocation
//                                   stored them itself)
//   staging_reads_total             onboards answered from the staging
//   staging_bytes                   gauge: bytes staged, not yet stored
//   staging_capacity_bytes          gauge: the most it holds (0: no staging)
//
// Thread safety: as common/metrics.h; updated from the worker's event-loop thread.
#pragma once

#include <memory>
#include <vector>

#include "common/metrics.h"
#include "services/worker/offload_queue.h"
#include "services/worker/worker.h"

namespace kvtier::worker {

class WorkerMetrics {
 public:
  [[nodiscard]] static Result<std::unique_ptr<WorkerMetrics>> Create(MetricsRegistry& registry,
                                                                     size_t pools);

  // Brings every metric up to date with the worker's stats (counters by their growth).
  void Update(const WorkerStats& stats);
  // The same for the staging's counters (TierLink::StagingStats).
  void UpdateStaging(const OffloadQueueStats& stats);

 private:
  WorkerMetrics() = default;
  // Each registers its families (series at zero) with `registry`.
  [[nodiscard]] Status AddPools(MetricsRegistry& registry, size_t pools);
  [[nodiscard]] Status AddMoves(MetricsRegistry& registry);
  [[nodiscard]] Status AddStaging(MetricsRegistry& registry);
  GaugeFamily* pool_blocks_ = nullptr;
  GaugeFamily* pool_held_ = nullptr;
  CounterFamily* allocated_ = nullptr;
  CounterFamily* reused_ = nullptr;
  CounterFamily* partial_ = nullptr;
  CounterFamily* evictions_ = nullptr;
  Counter* offloaded_blocks_ = nullptr;
  Counter* offloaded_bytes_ = nullptr;
  Counter* dropped_offloads_ = nullptr;
  Counter* onboarded_blocks_ = nullptr;
  Counter* onboarded_bytes_ = nullptr;
  Counter* landed_in_place_ = nullptr;
  CounterFamily* transfer_seconds_ = nullptr;
  CounterFamily* tier_seconds_ = nullptr;
  CounterFamily* staged_ = nullptr;
  Counter* staging_full_ = nullptr;
  Counter* staging_reads_ = nullptr;
  Gauge* staging_bytes_ = nullptr;
  Gauge* staging_capacity_ = nullptr;
  WorkerStats last_;  // what the counters already include
  OffloadQueueStats last_staging_;
};

}  // namespace kvtier::worker
