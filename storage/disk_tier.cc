#include "storage/disk_tier.h"

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
  Status Recover() {
    MutexLock write_lock(write_mu_);
    MutexLock lock(mu_);
    rocksdb::WriteBatch batch;  // deletes of unusable headers
    uint64_t lost = 0;
    Status scanned;
    families_->ForEach([&](std::string_view format_tag, rocksdb::ColumnFamilyHandle* family)
                           KVTIER_REQUIRES(write_mu_, mu_) {
                             if (scanned.ok())
                               scanned = RecoverLayout(format_tag, family, batch, lost);
                           });
    KVTIER_RETURN_IF_ERROR(scanned);
    segments_->DropUnreferenced();
    lost_at_open_ = lost;
    if (lost > 0) {
      spdlog::warn("disk tier {}: {} blocks whose payload was not on disk were dropped",
                   options_.path, lost);
    }
    std::vector<EvictedBlock> evicted;
    Status written = EvictLocked(0, batch, evicted);  // the capacity may have shrunk
    if (written.ok())
      written = FromRocks(db_.Write(write_options_, &batch), "dropping unreadable headers");
    SettleEvictionsLocked(evicted, written.ok());
    return written;
  }

  // Payloads first (one gathered write into room reserved in the active segment, synced
  // under kFsync), then the headers with their locations in one RocksDB batch: an
  // acknowledged block has both. The I/O runs outside mu_, so gets are not held up by it;
  // write_mu_ keeps puts, removals and compaction in order. Batches put meanwhile from
  // other threads are written together (put_groups_): one write and, under kFsync, one
  // pair of syncs for the group.
  std::vector<Status> PutBatch(std::span<const PutItem> items) {
    // The checks (the XXH3 pass above all) need no lock: puts from several threads hash
    // in parallel and queue only for the write.
    std::vector<Status> results(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      const PutItem& item = items[i];
      results[i] =
          ValidatePut(item.header, item.payload, item.checksum_checked, options_.max_block_bytes);
    }
    put_groups_.Commit(items, results,
                       [this](std::span<const PutItem> group, std::vector<Status>& group_results) {
                         MutexLock write_lock(write_mu_);
                         PutBatchLocked(group, group_results);
                         // After a write (not when the disk just refused one: the move would fail
                         // too).
                         const auto wrote = [](const Status& s) { return s.ok(); };
                         if (std::any_of(group_results.begin(), group_results.end(), wrote))
                           Compact();
                       });
    return results;
  }

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

  Result<BlockHeader> Get(const BlockRef& ref, std::span<uint8_t> out) {
    BlockHeader header;
    uint64_t location = 0;
    std::shared_ptr<const SegmentFile> file;
    {
      MutexLock lock(mu_);
      const uint32_t id = index_.FindVisible(ref);
      if (id == TierIndex::kNil) {
        ++stats_.misses;
        return NotFound();
      }
      header = index_.CurrentHeader(id);
      if (out.size() < header.payload_bytes) {
        return InvalidArgumentError("buffer of " + std::to_string(out.size()) +
                                    " bytes is too small for block " + ref.key.ToHex() + " of " +
                                    std::to_string(header.payload_bytes) + " bytes");
      }
      location = index_.entry(id).location;
      file = segments_->File(SegmentOf(location));
      index_.Touch(id);
    }
    // Read outside the lock: the file stays readable even if the block is deleted now.
    Result<uint64_t> hash =
        file == nullptr ? UnavailableError("its segment file is gone")
                        : file->ReadHashed(OffsetOf(location), out.first(header.payload_bytes));
    if (!hash.ok()) {
      MutexLock lock(mu_);
      ++stats_.io_errors;
      return hash.status().WithContext("disk tier: reading block " + ref.key.ToHex());
    }
    if (*hash != header.checksum) return DropCorrupt(header, location);
    MutexLock lock(mu_);
    ++stats_.hits;
    stats_.bytes_read += header.payload_bytes;
    return header;
  }

  Result<BlockHeader> Peek(const BlockRef& ref) {
    MutexLock lock(mu_);
    const uint32_t id = index_.FindVisible(ref);
    if (id == TierIndex::kNil) return NotFound();
    return index_.CurrentHeader(id);
  }

  Status Remove(const BlockRef& ref) {
    MutexLock write_lock(write_mu_);
    MutexLock lock(mu_);
    const uint32_t id = index_.FindVisible(ref);
    if (id == TierIndex::kNil) return NotFound();
    rocksdb::WriteBatch batch;
    KVTIER_RETURN_IF_ERROR(DeleteHeader(index_.entry(id).header, batch));
    Status removed =
        FromRocks(db_.Write(write_options_, &batch), "removing block " + ref.key.ToHex());
    if (!removed.ok()) {
      ++stats_.io_errors;
      return removed;  // nothing changed: the block stays, whole and readable
    }
    segments_->Release(index_.entry(id).location, index_.entry(id).header.payload_bytes);
    TellRemoved(id);
    index_.Erase(id);
    return Status::Ok();
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
    std::vector<BlockHeader> headers;
    headers.reserve(index_.size());
    index_.ForEach([&](uint32_t id) {
      mu_.AssertHeld();
      headers.push_back(index_.CurrentHeader(id));
    });
    return headers;
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

  Result<StoredHeader> DecodeStored(const rocksdb::Slice& value) const {
    return DecodeStoredHeader({reinterpret_cast<const uint8_t*>(value.data()), value.size()},
                              options_.max_block_bytes);
  }

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
  Status WritePayloads(std::span<const PutItem> items, const StagedBatch& staged) const {
    if (!staged.reservation) return Status::Ok();
    std::vector<std::span<const uint8_t>> payloads;
    payloads.reserve(staged.inserts.size());
    for (size_t i : staged.inserts) payloads.push_back(items[i].payload);
    const PayloadSegments::Reservation& reservation = *staged.reservation;
    KVTIER_RETURN_IF_ERROR(reservation.file->WriteAt(reservation.offset, payloads));
    if (options_.sync != DiskSync::kFsync) return Status::Ok();
    KVTIER_RETURN_IF_ERROR(reservation.file->Sync());
    return reservation.new_segment ? reservation.file->SyncDirectory() : Status::Ok();
  }

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

// Compaction: once dead bytes (payloads of deleted blocks in segments that still hold
// live ones) exceed a quarter of the live bytes and a segment's worth, the sealed segment
// with the smallest live share has its live blocks moved to the active segment and is
// deleted, after the put that finds the debt. The files thus hold at most about 1.25
// times the live bytes plus a segment. Under LRU eviction most segments empty whole
// (they are written in LRU order) and are deleted without copying; what compaction moves
// are the blocks kept hot long after their neighbours left.
//
// The copy runs outside mu_, as a put's write does: gets go on meanwhile (from the old
// copy). write_mu_, held throughout, keeps every other change out, so the blocks planned
// under mu_ are still there, at the same place, when the move is committed under it.
void DiskTier::Impl::Compact() {
  for (;;) {
    Result<SegmentMove> move = InternalError("no segment to compact");
    {
      MutexLock lock(mu_);
      const uint64_t live = segments_->live_bytes();
      if (segments_->file_bytes() - live <= std::max(options_.segment_bytes, live / 4)) return;
      const std::optional<uint32_t> sparse = segments_->SparsestSealed(1.0);
      if (!sparse) return;
      move = PlanMoveLocked(*sparse);
    }
    Status moved = move.status();
    if (moved.ok()) moved = CopyAndRecord(*move);
    MutexLock lock(mu_);
    if (!moved.ok()) {
      if (move.ok()) segments_->Abandon(move->to);
      ++stats_.io_errors;
      spdlog::warn("disk tier {}: compaction stopped: {}", options_.path, moved.ToString());
      return;
    }
    CommitMoveLocked(*move);
    if (segments_->File(move->segment) != nullptr) {  // it should have emptied: never loop on it
      spdlog::error("disk tier {}: segment {} still counts live bytes after its blocks moved",
                    options_.path, move->segment);
      return;
    }
  }
}

// The segment's live blocks, and room for all of them in the active segment.
Result<DiskTier::Impl::SegmentMove> DiskTier::Impl::PlanMoveLocked(uint32_t segment) {
  SegmentMove move;
  move.segment = segment;
  move.from = segments_->File(segment);
  if (move.from == nullptr)
    return InternalError("segment " + std::to_string(segment) + " vanished");
  std::vector<uint64_t> sizes;
  index_.ForEach([&](uint32_t id) {
    mu_.AssertHeld();
    if (SegmentOf(index_.entry(id).location) != segment) return;
    move.ids.push_back(id);
    move.headers.push_back(index_.CurrentHeader(id));
    move.old_locations.push_back(index_.entry(id).location);
    sizes.push_back(move.headers.back().payload_bytes);
  });
  KVTIER_ASSIGN_OR_RETURN(move.to, segments_->Reserve(sizes));
  return move;
}

// Outside mu_: reads every block (checking its checksum), writes them all to the reserved
// room, syncs under kFsync, and records the new locations (and the deletes of blocks
// found corrupt on the way) in RocksDB. Nothing is visible to readers until the commit.
Status DiskTier::Impl::CopyAndRecord(SegmentMove& move) {
  const auto buffer = std::make_unique_for_overwrite<uint8_t[]>(move.to.bytes);
  std::vector<std::span<const uint8_t>> payloads;
  rocksdb::WriteBatch batch;
  move.corrupt.assign(move.ids.size(), false);
  for (size_t k = 0, at = 0; k < move.ids.size(); at += move.headers[k].payload_bytes, ++k) {
    const std::span<uint8_t> out(buffer.get() + at, move.headers[k].payload_bytes);
    KVTIER_ASSIGN_OR_RETURN(const uint64_t hash,
                            move.from->ReadHashed(OffsetOf(move.old_locations[k]), out));
    payloads.push_back(out);  // a corrupt one too: its room is simply never referenced
    move.corrupt[k] = hash != move.headers[k].checksum;
    if (move.corrupt[k]) {
      KVTIER_RETURN_IF_ERROR(DeleteHeader(move.headers[k], batch));
    } else {
      KVTIER_RETURN_IF_ERROR(PutHeader(move.headers[k], move.to.locations[k], batch));
    }
  }
  KVTIER_RETURN_IF_ERROR(move.to.file->WriteAt(move.to.offset, payloads));
  if (options_.sync == DiskSync::kFsync) {
    KVTIER_RETURN_IF_ERROR(move.to.file->Sync());
    if (move.to.new_segment) KVTIER_RETURN_IF_ERROR(move.to.file->SyncDirectory());
  }
  return FromRocks(db_.Write(write_options_, &batch),
                   "moving segment " + std::to_string(move.segment));
}

void DiskTier::Impl::CommitMoveLocked(const SegmentMove& move) {
  for (size_t k = 0; k < move.ids.size(); ++k) {
    const uint64_t bytes = move.headers[k].payload_bytes;
    if (move.corrupt[k]) {  // dropped, as a read would have
      ++stats_.checksum_failures;
      segments_->Release(move.to.locations[k], bytes);
      TellRemoved(move.ids[k]);
      index_.Erase(move.ids[k]);
    } else {
      index_.Relocate(move.ids[k], move.to.locations[k]);
    }
    segments_->Release(move.old_locations[k], bytes);  // the last one deletes the segment
  }
}

Result<std::unique_ptr<DiskTier>> DiskTier::Create(DiskTierOptions options) {
  if (options.capacity_bytes == 0) return InvalidArgumentError("disk tier capacity is zero");
  if (options.segment_bytes < (1u << 20) || options.segment_bytes > (uint64_t{1} << 39)) {
    return InvalidArgumentError("disk tier segment_bytes must be between 1 MiB and 512 GiB, not " +
                                std::to_string(options.segment_bytes));
  }
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<HeaderFamilies> families, HeaderFamilies::Open(options));
  PayloadSegmentsOptions segment_options;
  segment_options.dir = (std::filesystem::path(options.path) / "segments").string();
  segment_options.segment_bytes = options.segment_bytes;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<PayloadSegments> segments,
                          PayloadSegments::Open(segment_options));
  auto impl = std::make_unique<Impl>(std::move(options), std::move(families), std::move(segments));
  KVTIER_RETURN_IF_ERROR(impl->Recover());
  return std::unique_ptr<DiskTier>(new DiskTier(std::move(impl)));
}

DiskTier::DiskTier(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DiskTier::~DiskTier() = default;
Status DiskTier::Put(const BlockHeader& header, std::span<const uint8_t> payload) {
  const PutItem item{header, payload};
  return std::move(impl_->PutBatch({&item, 1}).front());
}
std::vector<Status> DiskTier::PutBatch(std::span<const PutItem> items) {
  return impl_->PutBatch(items);
}
Result<BlockHeader> DiskTier::Get(const BlockRef& ref, std::span<uint8_t> out) {
  return impl_->Get(ref, out);
}
Result<BlockHeader> DiskTier::Peek(const BlockRef& ref) { return impl_->Peek(ref); }
Status DiskTier::Remove(const BlockRef& ref) { return impl_->Remove(ref); }
TierStats DiskTier::Stats() const { return impl_->Stats(); }
Status DiskTier::Flush() { return impl_->Flush(); }
DiskFiles DiskTier::Files() const { return impl_->Files(); }
std::vector<BlockHeader> DiskTier::Headers() const { return impl_->Headers(); }

}  // namespace kvtier::storage
