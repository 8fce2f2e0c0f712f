// StoreMetrics: Prometheus metrics of a node's tiers (a TieredStore).
//
//   kvtier_store_blocks{tier}                     gauge
//   kvtier_store_bytes{tier}                      gauge: payload bytes (host: pages in use)
//   kvtier_store_capacity_bytes{tier}             gauge
//   kvtier_store_medium_bytes{tier}               gauge: taken on the medium (disk: segment
//                                                 files, dead bytes included)
//   kvtier_store_hits_total{tier}                 counter
//   kvtier_store_misses_total{tier}               counter
//   kvtier_store_puts_total{tier}                 counter
//   kvtier_store_evictions_total{tier,priority}   counter
//   kvtier_store_checksum_failures_total{tier}    counter: corrupt blocks found (data loss)
//   kvtier_store_io_errors_total{tier}            counter: failed reads, writes, flushes
//   kvtier_store_written_bytes_total{tier}        counter: payload bytes stored
//   kvtier_store_read_bytes_total{tier}           counter: payload bytes read (hits)
//   kvtier_store_moves_total{kind}                counter: demoted, promoted,
//                                                 dropped_priority, dropped_admission,
//                                                 onboarded (into the node's worker's pool)
//   kvtier_store_demoted_ahead_total              counter: of the demoted, those the store's own
//                                                 thread moved down to keep room ahead of puts
//                                                 (store.host_free_percent); the rest waited on a
//                                                 put
//   kvtier_store_disk_put_batches_total           counter: the disk tier's put calls
//   kvtier_store_disk_put_writes_total            counter: the writes they went out in
//                                                 (batches that queue meanwhile go
//                                                 together: batches / writes is the mean)
//   kvtier_store_host_lent_pages_replaced_total   counter: host pages a zero-copy send lent
//                                                 and no reader acked, whose memory was
//                                                 replaced before reuse (a fault per 4 KiB)
//
// Update() brings them up to date from TieredStore::Stats (counters by their growth);
// call it from one thread at a time (the node's tick).
//
// Thread safety: Update from one thread; the registry is safe from any thread.
#pragma once

#include <memory>

#include "common/metrics.h"
#include "storage/tiered_store.h"

namespace kvtier::storage {

class StoreMetrics {
 public:
  [[nodiscard]] static Result<std::unique_ptr<StoreMetrics>> Create(MetricsRegistry& registry);
  void Update(const TieredStoreStats& stats);

 private:
  StoreMetrics() = default;
  void UpdateTier(const char* tier, const TierStats& now, TierStats& before);

  GaugeFamily* blocks_ = nullptr;
  GaugeFamily* bytes_ = nullptr;
  GaugeFamily* capacity_ = nullptr;
  GaugeFamily* medium_ = nullptr;
  CounterFamily* hits_ = nullptr;
  CounterFamily* misses_ = nullptr;
  CounterFamily* puts_ = nullptr;
  CounterFamily* evictions_ = nullptr;
  CounterFamily* checksum_failures_ = nullptr;
  CounterFamily* io_errors_ = nullptr;
  CounterFamily* bytes_written_ = nullptr;
  CounterFamily* bytes_read_ = nullptr;
  CounterFamily* moves_ = nullptr;
  CounterFamily* demoted_ahead_ = nullptr;
  CounterFamily* disk_put_batches_ = nullptr;
  CounterFamily* disk_put_writes_ = nullptr;
  CounterFamily* lent_pages_replaced_ = nullptr;
  TierStats host_before_, disk_before_;
  TieredStoreStats before_;
};

}  // namespace kvtier::storage
