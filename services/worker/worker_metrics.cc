#include "services/worker/worker_metrics.h"

#include <string>

namespace kvtier::worker {
namespace {

void IncBy(Counter& counter, uint64_t now, uint64_t before) {
  if (now > before) counter.Inc(static_cast<double>(now - before));
}

}  // namespace

Result<std::unique_ptr<WorkerMetrics>> WorkerMetrics::Create(MetricsRegistry& r, size_t pools) {
  std::unique_ptr<WorkerMetrics> m(new WorkerMetrics());
  KVTIER_RETURN_IF_ERROR(m->AddPools(r, pools));
  KVTIER_RETURN_IF_ERROR(m->AddMoves(r));
  KVTIER_RETURN_IF_ERROR(m->AddStaging(r));
  return m;
}

Status WorkerMetrics::AddPools(MetricsRegistry& r, size_t pools) {
  KVTIER_ASSIGN_OR_RETURN(
      pool_blocks_,
      r.AddGauge("kvtier_worker_pool_blocks",
                 "Blocks of a pool by state: free, cached (reusable), in_use.", {"pool", "state"}));
  KVTIER_ASSIGN_OR_RETURN(
      pool_held_,
      r.AddGauge("kvtier_worker_pool_held_blocks",
                 "Blocks of a pool held for transfers off the worker's event loop (a peer "
                 "reading them, or fetched blocks landing in them); in_use counts them too.",
                 {"pool"}));
  KVTIER_ASSIGN_OR_RETURN(allocated_, r.AddCounter("kvtier_worker_allocated_blocks_total",
                                                   "Blank blocks handed out.", {"pool"}));
  KVTIER_ASSIGN_OR_RETURN(
      reused_, r.AddCounter("kvtier_worker_reused_blocks_total",
                            "Full blocks found cached when a sequence started.", {"pool"}));
  KVTIER_ASSIGN_OR_RETURN(
      partial_,
      r.AddCounter("kvtier_worker_partial_reuses_total",
                   "Partially matching blocks reused, in place or by copy.", {"pool", "how"}));
  KVTIER_ASSIGN_OR_RETURN(evictions_, r.AddCounter("kvtier_worker_evictions_total",
                                                   "Blocks evicted from a pool, by their priority.",
                                                   {"pool", "priority"}));
  last_.pools.resize(pools);
  // Every pool's series exist from the start, at zero.
  for (size_t p = 0; p < pools; ++p) {
    const std::string pool = std::to_string(p);
    for (const char* state : {"free", "cached", "in_use"}) pool_blocks_->WithLabels({pool, state});
    pool_held_->WithLabels({pool});
    allocated_->WithLabels({pool});
    reused_->WithLabels({pool});
    partial_->WithLabels({pool, "in_place"});
    partial_->WithLabels({pool, "copy"});
  }
  return Status::Ok();
}

Status WorkerMetrics::AddMoves(MetricsRegistry& r) {
  KVTIER_ASSIGN_OR_RETURN(CounterFamily * offloaded,
                          r.AddCounter("kvtier_worker_offloaded_blocks_total",
                                       "Evicted blocks handed to the host tier."));
  KVTIER_ASSIGN_OR_RETURN(CounterFamily * bytes,
                          r.AddCounter("kvtier_worker_offloaded_bytes_total",
                                       "Bytes of the blocks handed to the host tier."));
  KVTIER_ASSIGN_OR_RETURN(
      CounterFamily * dropped,
      r.AddCounter("kvtier_worker_dropped_offloads_total",
                   "Evicted blocks worth offloading that no host tier took (dropped)."));
  KVTIER_ASSIGN_OR_RETURN(CounterFamily * onboarded,
                          r.AddCounter("kvtier_worker_onboarded_blocks_total",
                                       "Blocks brought into a pool from the node's tiers."));
  KVTIER_ASSIGN_OR_RETURN(
      CounterFamily * onboarded_bytes,
      r.AddCounter("kvtier_worker_onboarded_bytes_total",
                   "Bytes of the blocks brought into a pool from the node's tiers."));
  KVTIER_ASSIGN_OR_RETURN(
      CounterFamily * in_place,
      r.AddCounter("kvtier_worker_onboarded_in_place_blocks_total",
                   "Blocks fetched from other nodes straight into their pool blocks (a host pool's "
                   "memory, or a GPU pool's by a scatter off the loop): no copy on the worker's "
                   "event loop."));
  KVTIER_ASSIGN_OR_RETURN(
      transfer_seconds_,
      r.AddCounter("kvtier_worker_transfer_seconds_total",
                   "Time moving pool bytes, by path: offload (victims read out), onboard (blocks "
                   "landed), copy (partial reuse); on a GPU the kernels and their waits.",
                   {"op"}));
  for (const char* op : {"offload", "onboard", "copy"}) transfer_seconds_->WithLabels({op});
  KVTIER_ASSIGN_OR_RETURN(
      tier_seconds_,
      r.AddCounter("kvtier_worker_tier_seconds_total",
                   "Time on the worker's event loop in its tiers, by path: offload (victims, once "
                   "read out, hashed and handed to the host tier or a store), onboard (blocks "
                   "fetched from the node's tiers or a peer before they land).",
                   {"op"}));
  for (const char* op : {"offload", "onboard"}) tier_seconds_->WithLabels({op});
  onboarded_blocks_ = &onboarded->WithLabels({});
  onboarded_bytes_ = &onboarded_bytes->WithLabels({});
  landed_in_place_ = &in_place->WithLabels({});
  offloaded_blocks_ = &offloaded->WithLabels({});
  offloaded_bytes_ = &bytes->WithLabels({});
  dropped_offloads_ = &dropped->WithLabels({});
  return Status::Ok();
}

Status WorkerMetrics::AddStaging(MetricsRegistry& r) {
  KVTIER_ASSIGN_OR_RETURN(
      staged_, r.AddCounter("kvtier_worker_staged_offloads_total",
                            "Evicted blocks staged (worker.offload_staging_bytes) and since "
                            "stored by the staging's thread, refused by the store, or withdrawn "
                            "unstored once fetched back into a pool.",
                            {"result"}));
  for (const char* result : {"stored", "failed", "withdrawn"}) staged_->WithLabels({result});
  KVTIER_ASSIGN_OR_RETURN(
      CounterFamily * full,
      r.AddCounter("kvtier_worker_staging_full_offloads_total",
                   "Evicted blocks the offload staging had no room for: the allocation stored "
                   "them itself."));
  KVTIER_ASSIGN_OR_RETURN(CounterFamily * reads,
                          r.AddCounter("kvtier_worker_staging_reads_total",
                                       "Onboards answered from the offload staging."));
  KVTIER_ASSIGN_OR_RETURN(GaugeFamily * bytes,
                          r.AddGauge("kvtier_worker_staging_bytes",
                                     "Bytes of evicted blocks staged and not yet stored."));
  KVTIER_ASSIGN_OR_RETURN(
      GaugeFamily * capacity,
      r.AddGauge("kvtier_worker_staging_capacity_bytes",
                 "The most bytes the offload staging holds (worker.offload_staging_bytes)."));
  staging_full_ = &full->WithLabels({});
  staging_reads_ = &reads->WithLabels({});
  staging_bytes_ = &bytes->WithLabels({});
  staging_capacity_ = &capacity->WithLabels({});
  return Status::Ok();
}

void WorkerMetrics::UpdateStaging(const OffloadQueueStats& stats) {
  IncBy(staged_->WithLabels({"stored"}), stats.stored, last_staging_.stored);
  IncBy(staged_->WithLabels({"failed"}), stats.failed, last_staging_.failed);
  IncBy(staged_->WithLabels({"withdrawn"}), stats.withdrawn, last_staging_.withdrawn);
  IncBy(*staging_full_, stats.no_room, last_staging_.no_room);
  IncBy(*staging_reads_, stats.served, last_staging_.served);
  staging_bytes_->Set(static_cast<double>(stats.staged_bytes));
  staging_capacity_->Set(static_cast<double>(stats.capacity_bytes));
  last_staging_ = stats;
}

void WorkerMetrics::Update(const WorkerStats& stats) {
  for (size_t p = 0; p < stats.pools.size() && p < last_.pools.size(); ++p) {
    const BlockPoolStats& now = stats.pools[p];
    const BlockPoolStats& before = last_.pools[p];
    const std::string pool = std::to_string(p);
    pool_blocks_->WithLabels({pool, "free"}).Set(now.free);
    pool_blocks_->WithLabels({pool, "cached"}).Set(now.cached);
    pool_blocks_->WithLabels({pool, "in_use"}).Set(now.in_use);
    pool_held_->WithLabels({pool}).Set(now.held);
    IncBy(allocated_->WithLabels({pool}), now.allocated_blocks, before.allocated_blocks);
    IncBy(reused_->WithLabels({pool}), now.reused_blocks, before.reused_blocks);
    IncBy(partial_->WithLabels({pool, "in_place"}), now.partial_reuses, before.partial_reuses);
    IncBy(partial_->WithLabels({pool, "copy"}), now.partial_copies, before.partial_copies);
    for (size_t priority = 0; priority < now.evictions_by_priority.size(); ++priority) {
      if (now.evictions_by_priority[priority] > before.evictions_by_priority[priority]) {
        IncBy(evictions_->WithLabels({pool, std::to_string(priority)}),
              now.evictions_by_priority[priority], before.evictions_by_priority[priority]);
      }
    }
  }
  IncBy(*offloaded_blocks_, stats.offloaded_blocks, last_.offloaded_blocks);
  IncBy(*offloaded_bytes_, stats.offloaded_bytes, last_.offloaded_bytes);
  IncBy(*dropped_offloads_, stats.dropped_offloads, last_.dropped_offloads);
  IncBy(*onboarded_blocks_, stats.onboarded_blocks, last_.onboarded_blocks);
  IncBy(*onboarded_bytes_, stats.onboarded_bytes, last_.onboarded_bytes);
  IncBy(*landed_in_place_, stats.landed_in_place, last_.landed_in_place);
  const auto seconds = [](Nanos now, Nanos before) {
    return std::chrono::duration<double>(now - before).count();
  };
  transfer_seconds_->WithLabels({"offload"})
      .Inc(seconds(stats.offload_transfer, last_.offload_transfer));
  transfer_seconds_->WithLabels({"onboard"})
      .Inc(seconds(stats.onboard_transfer, last_.onboard_transfer));
  transfer_seconds_->WithLabels({"copy"}).Inc(seconds(stats.copy_transfer, last_.copy_transfer));
  tier_seconds_->WithLabels({"offload"}).Inc(seconds(stats.offload_store, last_.offload_store));
  tier_seconds_->WithLabels({"onboard"}).Inc(seconds(stats.onboard_fetch, last_.onboard_fetch));
  const size_t pools = last_.pools.size();
  last_ = stats;
  last_.pools.resize(pools);
}

}  // namespace kvtier::worker
