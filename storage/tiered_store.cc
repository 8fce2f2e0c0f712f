#include "storage/tiered_store.h"

#include <atomic>
#include <mutex>
#include <shared_mutex>
#include <unordered_set>

#include "common/logging.h"
#include "common/thread_annotations.h"

namespace kvtier::storage {

class TieredStore::Impl {
 public:
  explicit Impl(TieredStoreOptions options) : options_(std::move(options)) {}

  // Creates the tiers with the store's eviction handlers bound to this object.
  Status Open() {
    if (options_.disk) {
      DiskTierOptions disk = *options_.disk;
      disk.on_evict = [this](const BlockHeader& header, auto) { Emit(StoreEvent::Kind::kRemoved, TierKind::kDisk, header); };
      KVTIER_ASSIGN_OR_RETURN(disk_, DiskTier::Create(std::move(disk)));
    }
    if (options_.host) {
      HostTierOptions host = *options_.host;
      host.on_evict = [this](const BlockHeader& header, std::span<const std::span<const uint8_t>> ranges) {
        Demote(header, ranges);
      };
      host.on_stored = [this](const BlockHeader& h) { Emit(StoreEvent::Kind::kStored, TierKind::kHost, h); };
      host.on_removed = [this](const BlockHeader& h) { Emit(StoreEvent::Kind::kRemoved, TierKind::kHost, h); };
      KVTIER_ASSIGN_OR_RETURN(host_, HostTier::Create(std::move(host)));
    }
    return Status::Ok();
  }

  // Into the host tier, puts run in parallel (mu_ shared; its on_stored tells each under
  // its lock); into a disk-only store they take mu_ whole, which orders their events.
  Status Put(const BlockHeader& header, std::span<const uint8_t> payload) {
    if (host_) {
      std::shared_lock lock(mu_);
      return host_->Put(header, payload);
    }
    std::unique_lock lock(mu_);
    Status stored = disk_->Put(header, payload);
    if (stored.ok()) Emit(StoreEvent::Kind::kStored, TierKind::kDisk, header);
    return stored;
  }

  std::vector<Status> PutBatch(std::span<const PutItem> items) {
    if (host_) {
      std::shared_lock lock(mu_);
      return host_->PutBatch(items);
    }
    std::unique_lock lock(mu_);
    std::vector<Status> results = disk_->PutBatch(items);
    for (size_t i = 0; i < items.size(); ++i) {
      if (results[i].ok()) Emit(StoreEvent::Kind::kStored, TierKind::kDisk, items[i].header);
    }
    return results;
  }

  Status Flush() { return disk_ ? disk_->Flush() : Status::Ok(); }

  Result<TieredHit> Get(const BlockRef& ref, std::span<uint8_t> out) {
    if (host_) {
      Result<BlockHeader> hit = host_->Get(ref, out);
      if (hit.ok()) return TieredHit{std::move(hit).value(), TierKind::kHost};
      if (!disk_ || hit.status().code() == StatusCode::kInvalidArgument) return hit.status();
      if (hit.status().code() == StatusCode::kDataLoss) NoteLoss(TierKind::kHost, ref);
    }
    if (!disk_) return NotFoundError("block " + ref.key.ToHex() + " is not stored here");
    Result<BlockHeader> hit = disk_->Get(ref, out);
    if (!hit.ok()) {
      if (hit.status().code() == StatusCode::kDataLoss) NoteLoss(TierKind::kDisk, ref);
      return hit.status();
    }
    if (host_ && options_.promote_on_hit) Promote(*hit, out.first(hit->payload_bytes));
    return TieredHit{std::move(hit).value(), TierKind::kDisk};
  }

  Result<BlockHeader> Peek(const BlockRef& ref) {
    if (host_) {
      if (auto header = host_->Peek(ref); header.ok()) return header;
    }
    if (disk_) return disk_->Peek(ref);
    return NotFoundError("block " + ref.key.ToHex() + " is not stored here");
  }

  Status Remove(const BlockRef& ref) {
    std::unique_lock lock(mu_);
    bool removed = host_ && host_->Remove(ref).ok();  // told by on_removed
    if (disk_) {
      auto header = disk_->Peek(ref);
      if (header.ok() && disk_->Remove(ref).ok()) {
        Emit(StoreEvent::Kind::kRemoved, TierKind::kDisk, *header);
        removed = true;
      }
    }
    return removed ? Status::Ok() : NotFoundError("block " + ref.key.ToHex() + " is not stored here");
  }

  std::vector<std::pair<TierKind, BlockHeader>> Holdings() const {
    std::vector<std::pair<TierKind, BlockHeader>> holdings;
    std::unordered_set<BlockKey, BlockKeyHash> in_host;
    if (host_) {
      for (BlockHeader& header : host_->Headers()) {
        in_host.insert(header.key);
        holdings.emplace_back(TierKind::kHost, std::move(header));
      }
    }
    if (disk_) {
      for (BlockHeader& header : disk_->Headers()) {
        if (!in_host.contains(header.key)) holdings.emplace_back(TierKind::kDisk, std::move(header));
      }
    }
    return holdings;
  }

  TieredStoreStats Stats() const {
    TieredStoreStats stats;
    if (host_) stats.host = host_->Stats();
    if (disk_) stats.disk = disk_->Stats();
    stats.demoted = demoted_.load();
    stats.dropped_below_priority = dropped_below_priority_.load();
    stats.dropped_by_admission = dropped_by_admission_.load();
    stats.promoted = promoted_.load();
    return stats;
  }

 private:
  void Emit(StoreEvent::Kind kind, TierKind tier, const BlockHeader& header, TierKind to_tier = TierKind::kDisk) {
    if (options_.on_event) options_.on_event(StoreEvent{kind, tier, to_tier, header});
  }

  // Runs under the host tier's lock. Whether the block can enter the disk tier only by
  // evicting others.
  bool DiskFullFor(const BlockHeader& header) const {
    const TierStats disk = disk_->Stats();
    return disk.bytes + header.payload_bytes > disk.capacity_bytes;
  }

  void Demote(const BlockHeader& header, std::span<const std::span<const uint8_t>> ranges) {
    if (!disk_ || header.priority < options_.demote_min_priority) {
      if (disk_) dropped_below_priority_.fetch_add(1);
      Emit(StoreEvent::Kind::kRemoved, TierKind::kHost, header);
      return;
    }
    if (options_.admit_to_disk && DiskFullFor(header) && !options_.admit_to_disk(header)) {
      dropped_by_admission_.fetch_add(1);
      Emit(StoreEvent::Kind::kRemoved, TierKind::kHost, header);
      return;
    }
    // The host pages are not contiguous; RocksDB takes one value, so gather once into a
    // buffer kept across demotions (the disk write costs far more than this copy).
    demote_buffer_.clear();
    for (auto range : ranges) demote_buffer_.insert(demote_buffer_.end(), range.begin(), range.end());
    Status written = disk_->Put(header, demote_buffer_);
    if (!written.ok()) {
      spdlog::warn("host tier eviction of block {} could not move to disk: {}", header.key.ToHex(), written.ToString());
      Emit(StoreEvent::Kind::kRemoved, TierKind::kHost, header);
      return;
    }
    demoted_.fetch_add(1);
    Emit(StoreEvent::Kind::kTierChanged, TierKind::kHost, header, TierKind::kDisk);
  }

  void Promote(const BlockHeader& header, std::span<const uint8_t> payload) {
    std::shared_lock lock(mu_);
    if (host_->Put(header, payload).ok()) promoted_.fetch_add(1);  // told by on_stored
  }

  void NoteLoss(TierKind tier, const BlockRef& ref) {
    std::unique_lock lock(mu_);
    BlockHeader header;
    header.key = ref.key;
    header.format_tag = std::string(ref.format_tag);
    header.salt_scope = ref.salt_scope;
    Emit(StoreEvent::Kind::kRemoved, tier, header);
  }

  const TieredStoreOptions options_;
  std::unique_ptr<DiskTier> disk_;  // declared before host_: host evictions write to it
  std::unique_ptr<HostTier> host_;
  // Orders the events of the changes the tiers do not tell under their own locks, held
  // whole by those changes: puts into a disk-only store, removals, losses. A host tier
  // tells its stores, removals and evictions (with the demotions they cause) under its
  // lock instead, so puts into it share mu_ and run in parallel; a removal still waits
  // for them, so that a demotion never writes a block to disk between a removal's disk
  // delete and its event.
  std::shared_mutex mu_;
  std::vector<uint8_t> demote_buffer_;  // used under the host lock (Demote)
  std::atomic<uint64_t> demoted_{0}, dropped_below_priority_{0}, dropped_by_admission_{0}, promoted_{0};
};

Result<std::unique_ptr<TieredStore>> TieredStore::Create(TieredStoreOptions options) {
  if (!options.host && !options.disk) return InvalidArgumentError("a tiered store needs a host tier, a disk tier or both");
  if (options.host && (options.host->on_evict || options.host->on_stored || options.host->on_removed)) {
    return InvalidArgumentError(
        "host tier on_evict, on_stored and on_removed are the tiered store's own; leave them empty");
  }
  if (options.disk && options.disk->on_evict) {
    return InvalidArgumentError("disk tier on_evict is the tiered store's own; leave it empty");
  }
  auto impl = std::make_unique<Impl>(std::move(options));
  KVTIER_RETURN_IF_ERROR(impl->Open());
  return std::unique_ptr<TieredStore>(new TieredStore(std::move(impl)));
}

TieredStore::TieredStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TieredStore::~TieredStore() = default;
Status TieredStore::Put(const BlockHeader& header, std::span<const uint8_t> payload) { return impl_->Put(header, payload); }
std::vector<Status> TieredStore::PutBatch(std::span<const PutItem> items) { return impl_->PutBatch(items); }
Status TieredStore::Flush() { return impl_->Flush(); }

Result<TieredHit> TieredStore::Get(const BlockRef& ref, std::span<uint8_t> out) { return impl_->Get(ref, out); }
Result<BlockHeader> TieredStore::Peek(const BlockRef& ref) { return impl_->Peek(ref); }
bool TieredStore::Contains(const BlockRef& ref) { return impl_->Peek(ref).ok(); }
Status TieredStore::Remove(const BlockRef& ref) { return impl_->Remove(ref); }
std::vector<std::pair<TierKind, BlockHeader>> TieredStore::Holdings() const { return impl_->Holdings(); }
TieredStoreStats TieredStore::Stats() const { return impl_->Stats(); }

}  // namespace kvtier::storage
