#include "storage/store_metrics.h"

#include <string>

namespace kvtier::storage {
namespace {

void IncBy(Counter& counter, uint64_t now, uint64_t before) {
  if (now > before) counter.Inc(static_cast<double>(now - before));
}

}  // namespace

Result<std::unique_ptr<StoreMetrics>> StoreMetrics::Create(MetricsRegistry& r) {
  std::unique_ptr<StoreMetrics> m(new StoreMetrics());
  KVTIER_ASSIGN_OR_RETURN(m->blocks_,
                          r.AddGauge("kvtier_store_blocks", "Blocks held, by tier.", {"tier"}));
  KVTIER_ASSIGN_OR_RETURN(m->bytes_,
                          r.AddGauge("kvtier_store_bytes", "Bytes in use, by tier.", {"tier"}));
  KVTIER_ASSIGN_OR_RETURN(
      m->capacity_, r.AddGauge("kvtier_store_capacity_bytes", "Capacity, by tier.", {"tier"}));
  KVTIER_ASSIGN_OR_RETURN(m->medium_,
                          r.AddGauge("kvtier_store_medium_bytes",
                                     "Bytes taken on the medium, by tier (disk: segment files, "
                                     "dead bytes included).",
                                     {"tier"}));
  KVTIER_ASSIGN_OR_RETURN(
      m->hits_, r.AddCounter("kvtier_store_hits_total", "Reads that found the block.", {"tier"}));
  KVTIER_ASSIGN_OR_RETURN(
      m->misses_, r.AddCounter("kvtier_store_misses_total", "Reads that did not.", {"tier"}));
  KVTIER_ASSIGN_OR_RETURN(
      m->puts_, r.AddCounter("kvtier_store_puts_total", "Blocks offered to a tier.", {"tier"}));
  KVTIER_ASSIGN_OR_RETURN(
      m->evictions_,
      r.AddCounter("kvtier_store_evictions_total", "Blocks evicted from a tier, by their priority.",
                   {"tier", "priority"}));
  KVTIER_ASSIGN_OR_RETURN(
      m->checksum_failures_,
      r.AddCounter("kvtier_store_checksum_failures_total",
                   "Corrupt blocks found on read and deleted (data loss).", {"tier"}));
  KVTIER_ASSIGN_OR_RETURN(
      m->io_errors_,
      r.AddCounter("kvtier_store_io_errors_total",
                   "Reads, writes and flushes the tier's medium failed (not misses, not "
                   "corruption).",
                   {"tier"}));
  KVTIER_ASSIGN_OR_RETURN(m->bytes_written_,
                          r.AddCounter("kvtier_store_written_bytes_total",
                                       "Payload bytes of blocks stored in a tier.", {"tier"}));
  KVTIER_ASSIGN_OR_RETURN(
      m->bytes_read_, r.AddCounter("kvtier_store_read_bytes_total",
                                   "Payload bytes of blocks read from a tier (hits).", {"tier"}));
  KVTIER_ASSIGN_OR_RETURN(
      m->moves_,
      r.AddCounter("kvtier_store_moves_total",
                   "Blocks leaving the host tier or coming back, by what happened: "
                   "demoted, promoted, dropped_priority, dropped_admission, onboarded (into the "
                   "pool of the node's worker, which fetched them).",
                   {"kind"}));
  KVTIER_ASSIGN_OR_RETURN(
      m->demoted_ahead_,
      r.AddCounter("kvtier_store_demoted_ahead_total",
                   "Of the blocks demoted, those the store's own thread moved down to keep "
                   "room free ahead of puts (store.host_free_percent); the others were moved "
                   "by the put that needed their room, which waited for the disk.",
                   {}));
  KVTIER_ASSIGN_OR_RETURN(m->disk_put_batches_, r.AddCounter("kvtier_store_disk_put_batches_total",
                                                             "Put calls of the disk tier.", {}));
  KVTIER_ASSIGN_OR_RETURN(
      m->disk_put_writes_,
      r.AddCounter("kvtier_store_disk_put_writes_total",
                   "Writes the disk tier's put calls went out in (calls that queue while "
                   "one is written go together in the next).",
                   {}));
  KVTIER_ASSIGN_OR_RETURN(
      m->lent_pages_replaced_,
      r.AddCounter("kvtier_store_host_lent_pages_replaced_total",
                   "Host tier pages that a zero-copy send lent and no reader acked, whose "
                   "memory was replaced before they were written again (each costs that "
                   "put a page fault per 4 KiB).",
                   {}));
  // Every series exists from the start, at zero, so that dashboards and alerts see them.
  for (const char* tier : {"host", "disk"}) {
    for (CounterFamily* family : {m->hits_, m->misses_, m->puts_, m->checksum_failures_,
                                  m->io_errors_, m->bytes_written_, m->bytes_read_})
      family->WithLabels({tier});
  }
  for (const char* kind :
       {"demoted", "promoted", "dropped_priority", "dropped_admission", "onboarded"}) {
    m->moves_->WithLabels({kind});
  }
  m->demoted_ahead_->WithLabels({});
  m->disk_put_batches_->WithLabels({});
  m->disk_put_writes_->WithLabels({});
  m->lent_pages_replaced_->WithLabels({});
  return m;
}

void StoreMetrics::UpdateTier(const char* tier, const TierStats& now, TierStats& before) {
  blocks_->WithLabels({tier}).Set(static_cast<double>(now.blocks));
  bytes_->WithLabels({tier}).Set(static_cast<double>(now.bytes));
  capacity_->WithLabels({tier}).Set(static_cast<double>(now.capacity_bytes));
  medium_->WithLabels({tier}).Set(static_cast<double>(now.medium_bytes));
  IncBy(hits_->WithLabels({tier}), now.hits, before.hits);
  IncBy(misses_->WithLabels({tier}), now.misses, before.misses);
  IncBy(puts_->WithLabels({tier}), now.puts, before.puts);
  IncBy(checksum_failures_->WithLabels({tier}), now.checksum_failures, before.checksum_failures);
  IncBy(io_errors_->WithLabels({tier}), now.io_errors, before.io_errors);
  IncBy(bytes_written_->WithLabels({tier}), now.bytes_written, before.bytes_written);
  IncBy(bytes_read_->WithLabels({tier}), now.bytes_read, before.bytes_read);
  for (int priority = 0; priority <= 100; ++priority) {
    if (now.evictions_by_priority[priority] > before.evictions_by_priority[priority]) {
      IncBy(evictions_->WithLabels({tier, std::to_string(priority)}),
            now.evictions_by_priority[priority], before.evictions_by_priority[priority]);
    }
  }
  before = now;
}

void StoreMetrics::Update(const TieredStoreStats& stats) {
  if (stats.host) {
    IncBy(lent_pages_replaced_->WithLabels({}), stats.host->lent_pages_replaced,
          host_before_.lent_pages_replaced);
    UpdateTier("host", *stats.host, host_before_);  // then host_before_ is *stats.host
  }
  if (stats.disk) {
    IncBy(disk_put_batches_->WithLabels({}), stats.disk->put_batches, disk_before_.put_batches);
    IncBy(disk_put_writes_->WithLabels({}), stats.disk->put_writes, disk_before_.put_writes);
    UpdateTier("disk", *stats.disk, disk_before_);  // then disk_before_ is *stats.disk
  }
  IncBy(moves_->WithLabels({"demoted"}), stats.demoted, before_.demoted);
  IncBy(demoted_ahead_->WithLabels({}), stats.demoted_ahead, before_.demoted_ahead);
  IncBy(moves_->WithLabels({"promoted"}), stats.promoted, before_.promoted);
  IncBy(moves_->WithLabels({"dropped_priority"}), stats.dropped_below_priority,
        before_.dropped_below_priority);
  IncBy(moves_->WithLabels({"dropped_admission"}), stats.dropped_by_admission,
        before_.dropped_by_admission);
  IncBy(moves_->WithLabels({"onboarded"}), stats.onboarded, before_.onboarded);
  before_ = stats;
}

}  // namespace kvtier::storage
