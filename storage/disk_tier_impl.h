// DiskTier::Impl: the disk tier's state (the index of headers kept in RocksDB, the payload
// segments' bookkeeping, statistics) and its work: puts, reads, removes and recovery in
// disk_tier.cc, compaction in disk_tier_compaction.cc. Internal to storage/.
//
// Thread safety and lock order: as written at the members below (write_mu_, then mu_).
#pragma once

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>
#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "storage/disk_tier_internal.h"
#include "storage/header_families.h"
#include "storage/payload_segments.h"
#include "storage/put_group_queue.h"
#include "storage/stored_header.h"
#include "storage/tier_index.h"
#include "storage/disk_tier.h"

namespace kvtier::storage {

using disk_internal::FromRocks;
using disk_internal::HeaderFamilies;
using disk_internal::HeaderKey;

class DiskTier::Impl {
 public:
  Impl(DiskTierOptions options, std::unique_ptr<HeaderFamilies> families,
       std::unique_ptr<PayloadSegments> segments)
      : options_(std::move(options)),
        families_(std::move(families)),
        db_(families_->db()),
        segments_(std::move(segments)),
        index_(options_.clock) {
    write_options_.sync = options_.sync == DiskSync::kFsync;
    write_options_.disableWAL = options_.sync == DiskSync::kNone;
    stats_.capacity_bytes = options_.capacity_bytes;
  }

  // Rebuilds the index from every layout's headers and the segments' live bytes from the
  // locations the headers hold. Called once, before any use.
  Status Recover();

  // Payloads first (one gathered write into room reserved in the active segment, synced
  // under kFsync), then the headers with their locations in one RocksDB batch: an
  // acknowledged block has both. The I/O runs outside mu_, so gets are not held up by it;
  // write_mu_ keeps puts, removals and compaction in order. Batches put meanwhile from
  // other threads are written together (put_groups_): one write and, under kFsync, one
  // pair of syncs for the group.
  std::vector<Status> PutBatch(std::span<const PutItem> items);

  // `results`: the items' checks, kept where they failed and made the outcome elsewhere.
  void PutBatchLocked(std::span<const PutItem> items, std::vector<Status>& results)
      KVTIER_REQUIRES(write_mu_) {
    CreateFamilies(items, results);
    StagedBatch staged;
    Status written;
    {
      MutexLock lock(mu_);
      stats_.puts += items.size();
      written = Stage(items, results, staged);
      if (written.ok()) written = EvictLocked(staged.new_bytes, staged.batch, staged.evicted);
      if (written.ok()) written = ReservePayloads(items, staged);
    }
    if (written.ok()) written = WritePayloads(items, staged);
    if (written.ok())
      written = FromRocks(db_.Write(write_options_, &staged.batch), "writing blocks");
    MutexLock lock(mu_);
    // A batch that was not written evicted nothing: its victims' headers and payloads
    // are still on disk, so they go back into the index where they were.
    SettleEvictionsLocked(staged.evicted, written.ok());
    if (!written.ok() && staged.reservation) segments_->Abandon(*staged.reservation);
    if (!written.ok()) {
      if (written.code() != StatusCode::kInvalidArgument) ++stats_.io_errors;
      for (Status& result : results) {
        if (result.ok()) result = written;  // nothing of the batch was written
      }
      return;
    }
    for (size_t k = 0; k < staged.inserts.size(); ++k) {
      const PutItem& item = items[staged.inserts[k]];
      index_.Insert(item.header, item.header.payload_bytes, staged.reservation->locations[k]);
      stats_.bytes_written += item.header.payload_bytes;
      if (options_.on_stored) options_.on_stored(item.header);
    }
    for (size_t i : staged.refreshes) {
      const uint32_t id = index_.Find(items[i].header.key, items[i].header.format_tag);
      if (id == TierIndex::kNil) continue;  // evicted by this batch
      index_.Refresh(id, items[i].header);
      if (options_.on_stored) options_.on_stored(items[i].header);
    }
  }

  Result<BlockHeader> Get(const BlockRef& ref, std::span<uint8_t> out);

  Result<BlockHeader> Peek(const BlockRef& ref) {
    MutexLock lock(mu_);
    const uint32_t id = index_.FindVisible(ref);
    if (id == TierIndex::kNil) return NotFound();
    return index_.CurrentHeader(id);
  }

  Status Remove(const BlockRef& ref);

  std::vector<DisplacedBlock> DisplacedBy(const BlockHeader& header, uint64_t pending_bytes) {
    MutexLock lock(mu_);
    std::vector<DisplacedBlock> displaced;
    if (index_.Find(header.key, header.format_tag) != TierIndex::kNil) return displaced;
    const uint64_t before = index_.units() + pending_bytes;  // room the batch takes first
    const uint64_t after = before + header.payload_bytes;
    if (after <= options_.capacity_bytes) return displaced;
    const uint64_t skipped =
        before > options_.capacity_bytes ? before - options_.capacity_bytes : 0;
    uint64_t taken = 0;  // victims before `skipped` make room for the batch, not this block
    for (const uint32_t id : index_.VictimsFor(after - options_.capacity_bytes)) {
      taken += index_.entry(id).units;
      if (taken > skipped)
        displaced.push_back({index_.entry(id).header.key, index_.EffectivePriority(id)});
    }
    return displaced;
  }

  TierStats Stats() const {
    const PutGroupQueue::Totals puts = put_groups_.totals();
    MutexLock lock(mu_);
    TierStats stats = stats_;
    stats.put_batches = puts.batches;
    stats.put_writes = puts.groups;
    stats.blocks = index_.size();
    stats.bytes = index_.units();
    stats.medium_bytes = segments_->file_bytes();
    return stats;
  }

  DiskFiles Files() const {
    MutexLock lock(mu_);
    return {segments_->segments(), segments_->file_bytes(), segments_->live_bytes(), lost_at_open_};
  }

  Status Flush() {
    MutexLock write_lock(write_mu_);  // no put's write in flight: all of them are synced
    Status flushed;
    {
      MutexLock lock(mu_);
      flushed = segments_->Sync();
    }
    if (flushed.ok()) flushed = families_->Flush();
    if (!flushed.ok()) {
      MutexLock lock(mu_);
      ++stats_.io_errors;
    }
    return flushed;
  }

  std::vector<BlockHeader> Headers() const {
    MutexLock lock(mu_);
    return index_.CurrentHeaders();
  }

 private:
  // A miss allocates nothing (a constant), as the host tier's.
  static Status NotFound() {
    static const std::string* const kMiss =
        MessageConstant("the block is not in the disk tier under the format and scope asked for");
    return Status::Constant(StatusCode::kNotFound, kMiss);
  }

  // One layout's headers into the index. Unusable ones (undecodable, filed under another
  // layout or key, or whose payload is not on disk) join `batch` as deletes.
  Status RecoverLayout(std::string_view format_tag, rocksdb::ColumnFamilyHandle* family,
                       rocksdb::WriteBatch& batch, uint64_t& lost) KVTIER_REQUIRES(write_mu_, mu_) {
    std::unique_ptr<rocksdb::Iterator> it(db_.NewIterator(rocksdb::ReadOptions(), family));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      Result<StoredHeader> stored = DecodeStored(it->value());
      const bool readable =
          stored.ok() && stored->header.format_tag == format_tag &&
          HeaderKey(stored->header.key) == std::string_view(it->key().data(), it->key().size());
      if (!readable) {
        ++stats_.checksum_failures;
      } else if (!segments_->AddLive(stored->location, stored->header.payload_bytes)) {
        ++lost;  // its segment is gone or cut short
      } else {
        index_.Insert(stored->header, stored->header.payload_bytes, stored->location);
        continue;
      }
      KVTIER_RETURN_IF_ERROR(FromRocks(batch.Delete(family, it->key()), "batch"));
    }
    return FromRocks(it->status(), "scanning the headers of layout " + std::string(format_tag));
  }

  Result<StoredHeader> DecodeStored(const rocksdb::Slice& value) const;

  // The payload of a block taken out of the index. Its room is released (and a segment
  // left without live payloads deleted) only after the batch deleting its header is
  // written. Why: released first, a crash before that write would leave the header
  // pointing into a deleted segment, and recovery would count the block as lost.
  struct FreedPayload {
    uint64_t location = 0;
    uint64_t bytes = 0;
  };

  // A block an eviction took out of the index, its header's delete in the batch. Only
  // once that batch is written is the eviction done: its room released (after the write,
  // as FreedPayload says), counted and reported. A batch not written undoes it.
  struct EvictedBlock {
    BlockHeader header;  // as of the eviction (CurrentHeader)
    uint8_t priority = 0;
    uint64_t location = 0;
  };

  struct StagedBatch {
    rocksdb::WriteBatch batch;
    std::vector<size_t> inserts;  // new blocks: payload and header written
    std::optional<PayloadSegments::Reservation> reservation;  // the inserts' room, in order
    std::vector<size_t> refreshes;  // stored already: the header's policy fields rewritten
    uint64_t new_bytes = 0;
    std::vector<EvictedBlock> evicted;  // taken out of the index to make room
  };

  // Sorts the valid items into new blocks and refreshes (whose headers join the batch);
  // refused items get their error in `results`.
  Status Stage(std::span<const PutItem> items, std::vector<Status>& results, StagedBatch& staged)
      KVTIER_REQUIRES(write_mu_, mu_) {
    std::set<std::pair<std::string_view, BlockKey>> in_batch;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!results[i].ok()) continue;
      const BlockHeader& header = items[i].header;
      if (const uint32_t id = index_.Find(header.key, header.format_tag); id != TierIndex::kNil) {
        if (index_.entry(id).header.salt_scope != header.salt_scope) {
          results[i] = AlreadyExistsError("block " + header.key.ToHex() +
                                          " is stored under another salt scope");
          continue;
        }
        staged.refreshes.push_back(i);
        KVTIER_RETURN_IF_ERROR(PutHeader(header, index_.entry(id).location, staged.batch));
      } else if (header.payload_bytes > options_.capacity_bytes) {
        results[i] = ResourceExhaustedError("block of " + std::to_string(header.payload_bytes) +
                                            " bytes is larger than the whole disk tier (" +
                                            std::to_string(options_.capacity_bytes) + " bytes)");
      } else if (in_batch.emplace(header.format_tag, header.key).second) {
        staged.inserts.push_back(i);
        staged.new_bytes += header.payload_bytes;
      }  // else: a repeat of a block earlier in this batch, stored by that one
    }
    return Status::Ok();
  }

  // Reserves room for the new blocks' payloads and adds their headers, with the
  // locations, to the batch.
  Status ReservePayloads(std::span<const PutItem> items, StagedBatch& staged)
      KVTIER_REQUIRES(write_mu_, mu_) {
    if (staged.inserts.empty()) return Status::Ok();
    std::vector<uint64_t> sizes;
    sizes.reserve(staged.inserts.size());
    for (size_t i : staged.inserts) sizes.push_back(items[i].payload.size());
    KVTIER_ASSIGN_OR_RETURN(staged.reservation, segments_->Reserve(sizes));
    for (size_t k = 0; k < staged.inserts.size(); ++k) {
      KVTIER_RETURN_IF_ERROR(PutHeader(items[staged.inserts[k]].header,
                                       staged.reservation->locations[k], staged.batch));
    }
    return Status::Ok();
  }

  // Outside mu_ (under write_mu_): the reserved room is this put's alone.
  Status WritePayloads(std::span<const PutItem> items, const StagedBatch& staged) const;

  // Each valid item's layout gets its column family now, outside mu_ (its creation writes
  // RocksDB's MANIFEST); an item whose family cannot be made is refused with the reason.
  void CreateFamilies(std::span<const PutItem> items, std::vector<Status>& results)
      KVTIER_REQUIRES(write_mu_) {
    for (size_t i = 0; i < items.size(); ++i) {
      if (!results[i].ok()) continue;
      if (Result<rocksdb::ColumnFamilyHandle*> family =
              families_->FindOrCreate(items[i].header.format_tag);
          !family.ok()) {
        results[i] = family.status();
      }
    }
  }

  // The layout's family exists: made by CreateFamilies for a put, on disk for a stored block.
  Status PutHeader(const BlockHeader& header, uint64_t location, rocksdb::WriteBatch& batch)
      KVTIER_REQUIRES(write_mu_) {
    rocksdb::ColumnFamilyHandle* family = families_->Find(header.format_tag);
    if (family == nullptr) return InternalError("no column family for layout " + header.format_tag);
    return FromRocks(batch.Put(family, HeaderKey(header.key), EncodeStoredHeader(header, location)),
                     "batch");
  }

  Status DeleteHeader(const BlockHeader& header, rocksdb::WriteBatch& batch)
      KVTIER_REQUIRES(write_mu_) {
    rocksdb::ColumnFamilyHandle* family = families_->Find(header.format_tag);
    if (family == nullptr) return InternalError("no column family for layout " + header.format_tag);
    return FromRocks(batch.Delete(family, HeaderKey(header.key)), "batch");
  }

  // Takes block `id` out of the index: its header's delete joins `batch`, its payload
  // `freed` (for ReleaseLocked once the batch is written).
  Status DeleteLocked(uint32_t id, rocksdb::WriteBatch& batch, std::vector<FreedPayload>& freed)
      KVTIER_REQUIRES(write_mu_, mu_) {
    const TierIndex::Entry& entry = index_.entry(id);
    KVTIER_RETURN_IF_ERROR(DeleteHeader(entry.header, batch));
    freed.push_back({entry.location, entry.header.payload_bytes});
    index_.Erase(id);
    return Status::Ok();
  }

  void ReleaseLocked(const std::vector<FreedPayload>& freed) KVTIER_REQUIRES(mu_) {
    for (const FreedPayload& payload : freed) segments_->Release(payload.location, payload.bytes);
  }

  // Takes blocks out of the index until `incoming` more bytes fit; their deletes join
  // `batch`. Every block taken out is in `evicted`, also on error, for
  // SettleEvictionsLocked.
  Status EvictLocked(uint64_t incoming, rocksdb::WriteBatch& batch,
                     std::vector<EvictedBlock>& evicted) KVTIER_REQUIRES(write_mu_, mu_) {
    while (index_.units() + incoming > options_.capacity_bytes) {
      const uint32_t victim = index_.Victim();
      if (victim == TierIndex::kNil) break;
      const TierIndex::Entry& entry = index_.entry(victim);
      KVTIER_RETURN_IF_ERROR(DeleteHeader(entry.header, batch));
      evicted.push_back(
          {index_.CurrentHeader(victim), index_.EffectivePriority(victim), entry.location});
      index_.Erase(victim);
    }
    return Status::Ok();
  }

  // The batch holding `evicted`'s deletes was written: the evictions are done. It was
  // not: they are undone, each block back in its old place in the eviction order.
  void SettleEvictionsLocked(const std::vector<EvictedBlock>& evicted, bool written)
      KVTIER_REQUIRES(write_mu_, mu_) {
    if (!written) {
      for (auto it = evicted.rbegin(); it != evicted.rend(); ++it) {
        index_.Restore(it->header, it->header.payload_bytes, it->location);
      }
      return;
    }
    for (const EvictedBlock& block : evicted) {
      segments_->Release(block.location, block.header.payload_bytes);
      ++stats_.evictions;
      ++stats_.evictions_by_priority[block.priority];
      if (options_.on_evict) options_.on_evict(block.header, {});
    }
  }

  // Moving one sealed segment's live blocks (compaction).
  struct SegmentMove {
    uint32_t segment = 0;
    std::shared_ptr<const SegmentFile> from;
    std::vector<uint32_t> ids;  // its blocks, with their headers and locations
    std::vector<BlockHeader> headers;
    std::vector<uint64_t> old_locations;
    PayloadSegments::Reservation to;  // room for every one of them, in order
    std::vector<bool> corrupt;        // found so while copied: dropped at the commit
  };
  void Compact() KVTIER_REQUIRES(write_mu_) KVTIER_EXCLUDES(mu_);
  Result<SegmentMove> PlanMoveLocked(uint32_t segment) KVTIER_REQUIRES(write_mu_, mu_);
  Status CopyAndRecord(SegmentMove& move) KVTIER_REQUIRES(write_mu_) KVTIER_EXCLUDES(mu_);
  void CommitMoveLocked(const SegmentMove& move) KVTIER_REQUIRES(write_mu_, mu_);

  // Deletes the block whose payload at `location` failed its checksum (unless it was
  // replaced or moved since the read: the new copy is left alone).
  Status DropCorrupt(const BlockHeader& header, uint64_t location) {
    MutexLock write_lock(write_mu_);
    MutexLock lock(mu_);
    ++stats_.checksum_failures;
    const uint32_t id = index_.Find(header.key, header.format_tag);
    if (id != TierIndex::kNil && index_.entry(id).location == location) {
      const BlockHeader dropped = index_.CurrentHeader(id);
      rocksdb::WriteBatch batch;
      std::vector<FreedPayload> freed;
      if (DeleteLocked(id, batch, freed).ok()) {
        db_.Write(write_options_, &batch).PermitUncheckedError();
        if (options_.on_removed) options_.on_removed(dropped);
      }
      ReleaseLocked(freed);
    }
    return DataLossError("disk tier: block " + header.key.ToHex() +
                         " is corrupt (checksum mismatch); it was deleted");
  }

  void TellRemoved(uint32_t id) KVTIER_REQUIRES(write_mu_, mu_) {
    if (options_.on_removed) options_.on_removed(index_.CurrentHeader(id));
  }

  // A group's payloads: at most an eighth of the capacity (a batch's blocks never evict
  // one another, so a group near the tier's size would overfill it) and at most 64 MiB
  // (each member waits for the whole group's write).
  static uint64_t MaxGroupBytes(uint64_t capacity_bytes) {
    return std::clamp<uint64_t>(capacity_bytes / 8, 1, uint64_t{64} << 20);
  }

  const DiskTierOptions options_;
  PutGroupQueue put_groups_{MaxGroupBytes(options_.capacity_bytes)};
  const std::unique_ptr<HeaderFamilies> families_ KVTIER_PT_GUARDED_BY(write_mu_);
  rocksdb::DB& db_;  // families_'s; its own calls are thread-safe
  rocksdb::WriteOptions write_options_;
  // Lock order: put_groups_'s queue lock is a leaf (a put group is written after it is
  // let go), then write_mu_, then mu_. write_mu_ is held by every change (put, remove,
  // dropping a corrupt block, compaction after a put), for its I/O too; mu_ only around
  // the index and the segments' bookkeeping, never across I/O, so that reads wait for no
  // write.
  // write_mu_ also guards the map of layout families (families_): it changes on a put.
  Mutex write_mu_;
  mutable Mutex mu_ KVTIER_ACQUIRED_AFTER(write_mu_);
  const std::unique_ptr<PayloadSegments> segments_ KVTIER_PT_GUARDED_BY(mu_);
  TierIndex index_ KVTIER_GUARDED_BY(mu_);
  TierStats stats_ KVTIER_GUARDED_BY(mu_);
  uint64_t lost_at_open_ KVTIER_GUARDED_BY(mu_) = 0;
};

}  // namespace kvtier::storage
