#include "storage/disk_tier.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <cstring>
#include <set>

#include "common/thread_annotations.h"
#include "storage/disk_tier_internal.h"
#include "storage/tier_index.h"

namespace kvtier::storage {

using disk_internal::FromRocks;
using disk_internal::HeaderKey;
using disk_internal::PayloadKey;

class DiskTier::Impl {
 public:
  Impl(DiskTierOptions options, disk_internal::OpenedDb opened)
      : options_(std::move(options)),
        db_(std::move(opened.db)),
        headers_cf_(opened.headers),
        default_cf_(opened.default_family),
        payload_cfs_(std::move(opened.payload_families)),
        index_(options_.clock) {
    write_options_.sync = options_.sync == DiskSync::kFsync;
    write_options_.disableWAL = options_.sync == DiskSync::kNone;
    // Payload reads skip RocksDB's own CRC of the blob record: the XXH3 of every payload
    // is checked below anyway, and the CRC over the same bytes would cost a second pass.
    payload_read_options_.verify_checksums = false;
    stats_.capacity_bytes = options_.capacity_bytes;
  }

  ~Impl() {
    std::lock_guard lock(mu_);
    for (auto& [tag, handle] : payload_cfs_) db_->DestroyColumnFamilyHandle(handle).PermitUncheckedError();
    db_->DestroyColumnFamilyHandle(headers_cf_).PermitUncheckedError();
    db_->DestroyColumnFamilyHandle(default_cf_).PermitUncheckedError();
  }

  // Rebuilds the index from the headers column family. Called once, before any use.
  Status Recover() {
    std::lock_guard lock(mu_);
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), headers_cf_));
    std::vector<std::string> bad;
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      size_t consumed = 0;
      auto header = DecodeHeader({reinterpret_cast<const uint8_t*>(it->value().data()), it->value().size()}, consumed);
      if (!header.ok() || !payload_cfs_.contains(header->format_tag) ||
          !ValidateHeader(*header, options_.max_block_bytes).ok()) {
        bad.push_back(it->key().ToString());
        ++stats_.checksum_failures;
        continue;
      }
      index_.Insert(*header, header->payload_bytes, 0);
    }
    KVTIER_RETURN_IF_ERROR(FromRocks(it->status(), "scanning block headers"));
    rocksdb::WriteBatch batch;
    for (const std::string& key : bad) KVTIER_RETURN_IF_ERROR(FromRocks(batch.Delete(headers_cf_, key), "batch"));
    KVTIER_RETURN_IF_ERROR(EvictLocked(0, batch));  // the capacity may have shrunk
    return FromRocks(db_->Write(write_options_, &batch), "dropping unreadable headers");
  }

  std::vector<Status> PutBatch(std::span<const PutItem> items) {
    std::vector<Status> results(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      results[i] = ValidateBlock(items[i].header, items[i].payload, options_.max_block_bytes);
    }
    std::lock_guard lock(mu_);
    stats_.puts += items.size();
    StagedBatch staged;
    Status written = Stage(items, results, staged);
    if (written.ok()) written = EvictLocked(staged.new_bytes, staged.batch);
    if (written.ok()) {
      written = FromRocks(db_->Write(write_options_, &staged.batch), "writing blocks");
      if (!written.ok()) ++stats_.io_errors;
    }
    if (!written.ok()) {
      for (Status& result : results) {
        if (result.ok()) result = written;  // nothing of the batch was written
      }
      return results;
    }
    for (size_t i : staged.inserts) {
      index_.Insert(items[i].header, items[i].header.payload_bytes, 0);
      stats_.bytes_written += items[i].header.payload_bytes;
    }
    for (size_t i : staged.refreshes) {
      index_.Refresh(index_.Find(items[i].header.key, items[i].header.format_tag), items[i].header);
    }
    return results;
  }

  Result<BlockHeader> Get(const BlockRef& ref, std::span<uint8_t> out) {
    BlockHeader header;
    rocksdb::ColumnFamilyHandle* cf = nullptr;
    {
      std::lock_guard lock(mu_);
      const uint32_t id = index_.FindVisible(ref);
      if (id == TierIndex::kNil) {
        ++stats_.misses;
        return NotFound(ref);
      }
      header = index_.CurrentHeader(id);
      if (out.size() < header.payload_bytes) {
        return InvalidArgumentError("buffer of " + std::to_string(out.size()) + " bytes is too small for block " +
                                    ref.key.ToHex() + " of " + std::to_string(header.payload_bytes) + " bytes");
      }
      cf = payload_cfs_.at(header.format_tag);
      index_.Touch(id);
    }
    rocksdb::PinnableSlice value;
    rocksdb::Status read = db_->Get(payload_read_options_, cf, PayloadKey(ref.key), &value);
    if (read.IsNotFound()) return NotFound(ref);  // removed since the lookup
    const bool corrupt =
        read.IsCorruption() ||
        (read.ok() && (value.size() != header.payload_bytes ||
                       PayloadChecksum({reinterpret_cast<const uint8_t*>(value.data()), value.size()}) != header.checksum));
    if (corrupt) return DropCorrupt(header, read);
    if (!read.ok()) {
      std::lock_guard lock(mu_);
      ++stats_.io_errors;
      return FromRocks(read, "reading block " + ref.key.ToHex());
    }
    std::memcpy(out.data(), value.data(), value.size());
    std::lock_guard lock(mu_);
    ++stats_.hits;
    stats_.bytes_read += value.size();
    return header;
  }

  Result<BlockHeader> Peek(const BlockRef& ref) {
    std::lock_guard lock(mu_);
    const uint32_t id = index_.FindVisible(ref);
    if (id == TierIndex::kNil) return NotFound(ref);
    return index_.CurrentHeader(id);
  }

  Status Remove(const BlockRef& ref) {
    std::lock_guard lock(mu_);
    const uint32_t id = index_.FindVisible(ref);
    if (id == TierIndex::kNil) return NotFound(ref);
    rocksdb::WriteBatch batch;
    KVTIER_RETURN_IF_ERROR(DeleteLocked(id, batch));
    Status removed = FromRocks(db_->Write(write_options_, &batch), "removing block " + ref.key.ToHex());
    if (!removed.ok()) ++stats_.io_errors;
    return removed;
  }

  TierStats Stats() const {
    std::lock_guard lock(mu_);
    TierStats stats = stats_;
    stats.blocks = index_.size();
    stats.bytes = index_.units();
    return stats;
  }

  Status Flush() {
    std::vector<rocksdb::ColumnFamilyHandle*> handles{headers_cf_};
    {
      std::lock_guard lock(mu_);
      for (auto& [tag, handle] : payload_cfs_) handles.push_back(handle);
    }
    Status flushed = FromRocks(db_->Flush(rocksdb::FlushOptions(), handles), "flushing the disk tier");
    if (!flushed.ok()) {
      std::lock_guard lock(mu_);
      ++stats_.io_errors;
    }
    return flushed;
  }

  std::vector<BlockHeader> Headers() const {
    std::lock_guard lock(mu_);
    std::vector<BlockHeader> headers;
    headers.reserve(index_.size());
    index_.ForEach([&](uint32_t id) { headers.push_back(index_.CurrentHeader(id)); });
    return headers;
  }

 private:
  static Status NotFound(const BlockRef& ref) {
    return NotFoundError("block " + ref.key.ToHex() + " (" + std::string(ref.format_tag) + ") is not in the disk tier");
  }

  struct StagedBatch {
    rocksdb::WriteBatch batch;
    std::vector<size_t> inserts;    // new blocks: payload and header written
    std::vector<size_t> refreshes;  // stored already: the header's policy fields rewritten
    uint64_t new_bytes = 0;
  };

  // Sorts the valid items into new blocks and refreshes and adds their writes to the
  // batch; refused items get their error in `results`. An error return means the batch
  // could not be built (nothing is written).
  Status Stage(std::span<const PutItem> items, std::vector<Status>& results, StagedBatch& staged)
      KVTIER_REQUIRES(mu_) {
    std::set<std::pair<std::string_view, BlockKey>> in_batch;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!results[i].ok()) continue;
      const BlockHeader& header = items[i].header;
      if (const uint32_t id = index_.Find(header.key, header.format_tag); id != TierIndex::kNil) {
        if (index_.entry(id).header.salt_scope != header.salt_scope) {
          results[i] = AlreadyExistsError("block " + header.key.ToHex() + " is stored under another salt scope");
          continue;
        }
        staged.refreshes.push_back(i);
      } else if (header.payload_bytes > options_.capacity_bytes) {
        results[i] = ResourceExhaustedError("block of " + std::to_string(header.payload_bytes) +
                                            " bytes is larger than the whole disk tier (" +
                                            std::to_string(options_.capacity_bytes) + " bytes)");
        continue;
      } else if (in_batch.emplace(header.format_tag, header.key).second) {
        KVTIER_ASSIGN_OR_RETURN(rocksdb::ColumnFamilyHandle * cf, PayloadFamily(header.format_tag));
        const rocksdb::Slice payload(reinterpret_cast<const char*>(items[i].payload.data()), items[i].payload.size());
        KVTIER_RETURN_IF_ERROR(FromRocks(staged.batch.Put(cf, PayloadKey(header.key), payload), "batch"));
        staged.inserts.push_back(i);
        staged.new_bytes += header.payload_bytes;
      }  // else: a repeat of a block earlier in this batch, stored by that one
      KVTIER_RETURN_IF_ERROR(PutHeader(header, staged.batch));
    }
    return Status::Ok();
  }

  Result<rocksdb::ColumnFamilyHandle*> PayloadFamily(const std::string& tag) KVTIER_REQUIRES(mu_) {
    if (auto it = payload_cfs_.find(tag); it != payload_cfs_.end()) return it->second;
    rocksdb::ColumnFamilyHandle* handle = nullptr;
    KVTIER_RETURN_IF_ERROR(FromRocks(
        db_->CreateColumnFamily(disk_internal::PayloadFamilyOptions(options_), disk_internal::kPayloadPrefix + tag, &handle),
        "creating the column family of format " + tag));
    payload_cfs_.emplace(tag, handle);
    return handle;
  }

  Status PutHeader(const BlockHeader& header, rocksdb::WriteBatch& batch) {
    std::string encoded;
    EncodeHeader(header, encoded);
    return FromRocks(batch.Put(headers_cf_, HeaderKey(header.format_tag, header.key), encoded), "batch");
  }

  Status DeleteLocked(uint32_t id, rocksdb::WriteBatch& batch) KVTIER_REQUIRES(mu_) {
    const BlockHeader& header = index_.entry(id).header;
    KVTIER_RETURN_IF_ERROR(FromRocks(batch.Delete(payload_cfs_.at(header.format_tag), PayloadKey(header.key)), "batch"));
    KVTIER_RETURN_IF_ERROR(FromRocks(batch.Delete(headers_cf_, HeaderKey(header.format_tag, header.key)), "batch"));
    index_.Erase(id);
    return Status::Ok();
  }

  // Evicts until `incoming` more bytes fit; the deletes join `batch`.
  Status EvictLocked(uint64_t incoming, rocksdb::WriteBatch& batch) KVTIER_REQUIRES(mu_) {
    while (index_.units() + incoming > options_.capacity_bytes) {
      const uint32_t victim = index_.Victim();
      if (victim == TierIndex::kNil) break;
      const uint8_t priority = index_.EffectivePriority(victim);
      if (options_.on_evict) options_.on_evict(index_.CurrentHeader(victim), {});
      ++stats_.evictions;
      ++stats_.evictions_by_priority[priority];
      KVTIER_RETURN_IF_ERROR(DeleteLocked(victim, batch));
    }
    return Status::Ok();
  }

  Status DropCorrupt(const BlockHeader& header, const rocksdb::Status& read) {
    std::lock_guard lock(mu_);
    ++stats_.checksum_failures;
    const uint32_t id = index_.Find(header.key, header.format_tag);
    if (id != TierIndex::kNil) {
      rocksdb::WriteBatch batch;
      if (DeleteLocked(id, batch).ok()) db_->Write(write_options_, &batch).PermitUncheckedError();
    }
    return DataLossError("disk tier: block " + header.key.ToHex() + " is corrupt (" +
                         (read.ok() ? std::string("checksum mismatch") : read.ToString()) + "); it was deleted");
  }

  const DiskTierOptions options_;
  const std::unique_ptr<rocksdb::DB> db_;
  rocksdb::ColumnFamilyHandle* const headers_cf_;
  rocksdb::ColumnFamilyHandle* const default_cf_;  // unused; RocksDB requires it open
  rocksdb::WriteOptions write_options_;
  rocksdb::ReadOptions payload_read_options_;
  mutable std::mutex mu_;
  std::map<std::string, rocksdb::ColumnFamilyHandle*> payload_cfs_ KVTIER_GUARDED_BY(mu_);
  TierIndex index_ KVTIER_GUARDED_BY(mu_);
  TierStats stats_ KVTIER_GUARDED_BY(mu_);
};

Result<std::unique_ptr<DiskTier>> DiskTier::Create(DiskTierOptions options) {
  if (options.capacity_bytes == 0) return InvalidArgumentError("disk tier capacity is zero");
  KVTIER_ASSIGN_OR_RETURN(disk_internal::OpenedDb opened, disk_internal::OpenDb(options));
  auto impl = std::make_unique<Impl>(std::move(options), std::move(opened));
  KVTIER_RETURN_IF_ERROR(impl->Recover());
  return std::unique_ptr<DiskTier>(new DiskTier(std::move(impl)));
}

DiskTier::DiskTier(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DiskTier::~DiskTier() = default;
Status DiskTier::Put(const BlockHeader& header, std::span<const uint8_t> payload) {
  const PutItem item{header, payload};
  return std::move(impl_->PutBatch({&item, 1}).front());
}
std::vector<Status> DiskTier::PutBatch(std::span<const PutItem> items) { return impl_->PutBatch(items); }
Result<BlockHeader> DiskTier::Get(const BlockRef& ref, std::span<uint8_t> out) { return impl_->Get(ref, out); }
Result<BlockHeader> DiskTier::Peek(const BlockRef& ref) { return impl_->Peek(ref); }
Status DiskTier::Remove(const BlockRef& ref) { return impl_->Remove(ref); }
TierStats DiskTier::Stats() const { return impl_->Stats(); }
Status DiskTier::Flush() { return impl_->Flush(); }
std::vector<BlockHeader> DiskTier::Headers() const { return impl_->Headers(); }

}  // namespace kvtier::storage
