#include "storage/disk_tier.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "storage/disk_tier_impl.h"

namespace kvtier::storage {

Status DiskTier::Impl::Recover() {
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

std::vector<Status> DiskTier::Impl::PutBatch(std::span<const PutItem> items) {
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

Result<BlockHeader> DiskTier::Impl::Get(const BlockRef& ref, std::span<uint8_t> out) {
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

Status DiskTier::Impl::Remove(const BlockRef& ref) {
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

Result<StoredHeader> DiskTier::Impl::DecodeStored(const rocksdb::Slice& value) const {
  return DecodeStoredHeader({reinterpret_cast<const uint8_t*>(value.data()), value.size()},
                            options_.max_block_bytes);
}

Status DiskTier::Impl::WritePayloads(std::span<const PutItem> items,
                                     const StagedBatch& staged) const {
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
std::vector<DisplacedBlock> DiskTier::DisplacedBy(const BlockHeader& header,
                                                  uint64_t pending_bytes) {
  return impl_->DisplacedBy(header, pending_bytes);
}
Status DiskTier::Flush() { return impl_->Flush(); }
DiskFiles DiskTier::Files() const { return impl_->Files(); }
std::vector<BlockHeader> DiskTier::Headers() const { return impl_->Headers(); }

}  // namespace kvtier::storage
