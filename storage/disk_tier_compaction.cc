// DiskTier::Impl's compaction (disk_tier_impl.h).
#include <algorithm>
#include <vector>

#include "storage/disk_tier_impl.h"

namespace kvtier::storage {

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

}  // namespace kvtier::storage
