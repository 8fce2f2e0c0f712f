#include "storage/tiered_store.h"

#include <atomic>
#include <thread>
#include <type_traits>

#include "common/logging.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "common/thread_name.h"

namespace kvtier::storage {

class TieredStore::Impl {
 public:
  explicit Impl(TieredStoreOptions options) : options_(std::move(options)) {}
  ~Impl() {
    {
      MutexLock lock(ahead_mu_);
      stopping_ = true;
    }
    ahead_wanted_cv_.NotifyOne();
    if (demoter_.joinable()) demoter_.join();  // before the tiers it demotes between go
  }

  // Creates the tiers with the store's handlers bound to this object. Each tier tells its
  // own changes under its own lock, so a block's events leave in the order its changes
  // happened in each tier; a demotion is told as the disk's store, then the host's eviction.
  Status Open() {
    if (options_.disk) {
      DiskTierOptions disk = *options_.disk;
      disk.on_evict = [this](const BlockHeader& header, auto) {
        Emit(StoreEvent::Kind::kRemoved, Tier::kDisk, header);
      };
      disk.on_stored = [this](const BlockHeader& h) {
        Emit(StoreEvent::Kind::kStored, Tier::kDisk, h);
      };
      disk.on_removed = [this](const BlockHeader& h) {
        Emit(StoreEvent::Kind::kRemoved, Tier::kDisk, h);
      };
      KVTIER_ASSIGN_OR_RETURN(disk_, DiskTier::Create(std::move(disk)));
    }
    if (options_.host) {
      HostTierOptions host = *options_.host;
      if (disk_) {
        host.on_evict = [this](std::span<const EvictedBlockView> victims) { Demote(victims); };
      }
      host.on_stored = [this](const BlockHeader& h) {
        Emit(StoreEvent::Kind::kStored, Tier::kHost, h);
      };
      host.on_removed = [this](const BlockHeader& h) {
        Emit(StoreEvent::Kind::kRemoved, Tier::kHost, h);
      };
      host.on_evicted = [this](const BlockHeader& h) {
        Emit(StoreEvent::Kind::kRemoved, Tier::kHost, h);
      };
      KVTIER_ASSIGN_OR_RETURN(host_, HostTier::Create(std::move(host)));
    }
    if (host_ && disk_) {
      free_ahead_bytes_ =
          options_.free_ahead_bytes / options_.host->page_bytes * options_.host->page_bytes;
      if (free_ahead_bytes_ > 0) demoter_ = std::thread([this] { KeepRoomAhead(); });
    }
    return Status::Ok();
  }

  // Puts (and the demotions they cause) run in parallel, sharing mu_; the tiers tell
  // their events.
  Status Put(const BlockHeader& header, std::span<const uint8_t> payload) {
    return Filling(
        [&] { return host_ ? host_->Put(header, payload) : disk_->Put(header, payload); });
  }

  std::vector<Status> PutBatch(std::span<const PutItem> items) {
    return Filling([&] { return host_ ? host_->PutBatch(items) : disk_->PutBatch(items); });
  }

  std::vector<Status> PutBatchBehind(std::span<const PutItem> items) {
    return Filling([&] {
      // Room for the batch beyond the room kept ahead (best effort: a block already held,
      // whose put refreshes it, is counted too; puts beside this one may take pages).
      if (free_ahead_bytes_ > 0) host_->Reclaim(free_ahead_bytes_ + HostBytesOf(items));
      return host_ ? host_->PutBatch(items) : disk_->PutBatch(items);
    });
  }

  Status Flush() { return disk_ ? disk_->Flush() : Status::Ok(); }

  Result<TieredHit> Get(const BlockRef& ref, std::span<uint8_t> out) {
    Result<TieredHit> hit = Find(ref, out);
    if (Promotes(hit)) {
      const PutItem promotion = Promotion(*hit, out);
      Promote({&promotion, 1});
    }
    return hit;
  }

  std::vector<Result<TieredHit>> GetBatch(std::span<const BlockRef> refs,
                                          std::span<const std::span<uint8_t>> outs,
                                          PromoteDiskHits promote) {
    std::vector<Result<TieredHit>> hits;
    hits.reserve(refs.size());
    std::vector<PutItem> promotions;
    for (size_t i = 0; i < refs.size(); ++i) {
      hits.push_back(Find(refs[i], outs[i]));
      const Result<TieredHit>& hit = hits.back();
      if (promote == PromoteDiskHits::kYes && Promotes(hit))
        promotions.push_back(Promotion(*hit, outs[i]));
    }
    if (!promotions.empty()) Promote(promotions);
    return hits;
  }

  // The payload into `out` from the highest tier that has it; nothing promoted.
  Result<TieredHit> Find(const BlockRef& ref, std::span<uint8_t> out) {
    if (host_) {
      Result<BlockHeader> hit = host_->Get(ref, out);
      if (hit.ok()) return TieredHit{std::move(hit).value(), Tier::kHost};
      if (!disk_ || hit.status().code() == StatusCode::kInvalidArgument) return hit.status();
    }
    if (!disk_) return NotStoredHere();
    Result<BlockHeader> hit = disk_->Get(ref, out);  // a corrupt block is dropped and told
    if (!hit.ok()) return hit.status();
    return TieredHit{std::move(hit).value(), Tier::kDisk};
  }

  // A reserved put holds the shared lock while it reserves (its room is made as a put's)
  // and while it commits, not in between: the caller fills the pages meanwhile.
  Result<HostReservation> ReserveInHost(std::span<const BlockHeader> headers) {
    if (!host_) return FailedPreconditionError("this store has no host tier to reserve pages in");
    return Filling([&] { return host_->Reserve(headers); });  // the reservation takes its pages
  }

  std::vector<Status> CommitInHost(HostReservation reservation) {
    if (!host_) return {};  // an empty reservation: no store without a host tier makes another
    ReaderLock lock(mu_);
    return host_->Commit(std::move(reservation));
  }

  bool CanLendHostPages() const { return host_ != nullptr && host_->can_lend_pages(); }

  Result<PinnedBlock> PinInHost(const BlockRef& ref) {
    if (!host_) return NotFoundError("block " + ref.key.ToHex() + ": this store has no host tier");
    return host_->Pin(ref);
  }

  Result<BlockHeader> Peek(const BlockRef& ref) {
    if (host_) {
      if (auto header = host_->Peek(ref); header.ok()) return header;
    }
    if (disk_) return disk_->Peek(ref);
    return NotStoredHere();
  }

  // A miss allocates nothing (a constant), as the tiers' own misses.
  static Status NotStoredHere() {
    static const std::string* const kMiss = MessageConstant("the block is not stored here");
    return Status::Constant(StatusCode::kNotFound, kMiss);
  }

  // Only the host tier's lock, unlike Remove: the disk copy stays, so no demotion in flight
  // can bring back what this removes (one in flight has taken the block out already).
  Status MoveOutOfHost(const BlockRef& ref) {
    if (!host_) return NotFoundError("block " + ref.key.ToHex() + ": this store has no host tier");
    KVTIER_RETURN_IF_ERROR(host_->Remove(ref));
    onboarded_.fetch_add(1);
    return Status::Ok();
  }

  Status Remove(const BlockRef& ref) {
    WriterLock lock(mu_);
    const bool from_host = host_ && host_->Remove(ref).ok();  // each tier tells its removal
    const bool from_disk = disk_ && disk_->Remove(ref).ok();
    return from_host || from_disk
               ? Status::Ok()
               : NotFoundError("block " + ref.key.ToHex() + " is not stored here");
  }

  std::vector<std::pair<Tier, BlockHeader>> Holdings() const {
    std::vector<std::pair<Tier, BlockHeader>> holdings;
    if (host_) {
      for (BlockHeader& header : host_->Headers())
        holdings.emplace_back(Tier::kHost, std::move(header));
    }
    if (disk_) {
      for (BlockHeader& header : disk_->Headers())
        holdings.emplace_back(Tier::kDisk, std::move(header));
    }
    return holdings;
  }

  TieredStoreStats Stats() const {
    TieredStoreStats stats;
    if (host_) stats.host = host_->Stats();
    if (disk_) stats.disk = disk_->Stats();
    stats.demoted = demoted_.load();
    stats.demoted_ahead = demoted_ahead_.load();
    stats.dropped_below_priority = dropped_below_priority_.load();
    stats.dropped_by_admission = dropped_by_admission_.load();
    stats.promoted = promoted_.load();
    stats.onboarded = onboarded_.load();
    return stats;
  }

 private:
  void Emit(StoreEvent::Kind kind, Tier tier, const BlockHeader& header) {
    if (options_.on_event) options_.on_event(StoreEvent{kind, tier, header});
  }

  // The host tier pages `items` take, in bytes.
  uint64_t HostBytesOf(std::span<const PutItem> items) const {
    const uint64_t page = options_.host->page_bytes;
    uint64_t bytes = 0;
    for (const PutItem& item : items) bytes += (item.header.payload_bytes + page - 1) / page * page;
    return bytes;
  }

  // A put's host tier victims, outside the host tier's lock (its handler): each onto the
  // disk when its priority and the admission filter let it, all in one disk batch (one
  // write and one header batch; under the fsync policy one sync). The disk tells the
  // stores; the host tier then tells the evictions.
  void Demote(std::span<const EvictedBlockView> victims) {
    // A victim in one run of pages (every block, where the pages are the layout's block
    // size, as a node makes them) is written from there: the host tier holds its pages
    // until the handler returns. Others are gathered into a buffer of this thread's, kept
    // across demotions (puts demote in parallel), written out whenever it holds
    // kDemoteBatchBytes so that a large batch does not keep a large buffer.
    thread_local std::vector<uint8_t> gathered;
    thread_local std::vector<PutItem> items;  // gathered ones with an empty payload until written
    gathered.clear();
    items.clear();
    uint64_t pending = 0;  // the bytes of `items`
    for (const EvictedBlockView& victim : victims) {
      if (!Admitted(*victim.header, pending)) continue;
      // The bytes were hashed as they entered the host tier and stayed in this process;
      // unless its gets check them again (verify_on_get), neither does the move down. The
      // disk tier verifies every read: bytes changed in RAM meanwhile are never served.
      items.push_back({*victim.header, {}, /*checksum_checked=*/!options_.host->verify_on_get});
      pending += victim.header->payload_bytes;
      if (victim.payload.size() == 1) {
        items.back().payload = victim.payload.front();
      } else {
        for (auto range : victim.payload)
          gathered.insert(gathered.end(), range.begin(), range.end());
      }
      if (pending >= kDemoteBatchBytes) {
        WriteDown(gathered, items);
        pending = 0;
      }
    }
    WriteDown(gathered, items);
  }

  // The admitted victims onto disk in one batch; leaves both empty. Those without a
  // payload yet were gathered, in order, into `gathered`.
  void WriteDown(std::vector<uint8_t>& gathered, std::vector<PutItem>& items) {
    if (items.empty()) return;
    size_t offset = 0;  // the gathered spans, now that `gathered` has stopped growing
    for (PutItem& item : items) {
      if (!item.payload.empty()) continue;
      item.payload = std::span<const uint8_t>(gathered).subspan(offset, item.header.payload_bytes);
      offset += item.header.payload_bytes;
    }
    const std::vector<Status> written = disk_->PutBatch(items);
    for (size_t k = 0; k < items.size(); ++k) {
      if (written[k].ok()) {
        demoted_.fetch_add(1);
        if (std::this_thread::get_id() == demoter_.get_id()) demoted_ahead_.fetch_add(1);
      } else {
        spdlog::warn("host tier eviction of block {} could not move to disk: {}",
                     items[k].header.key.ToHex(), written[k].ToString());
      }
    }
    gathered.clear();
    items.clear();
  }

  // Whether a victim may move down: its priority, then (only when it would displace
  // others there, after the batch's `pending` bytes) the disk's admission.
  bool Admitted(const BlockHeader& header, uint64_t pending) {
    if (header.priority < options_.demote_min_priority) {
      dropped_below_priority_.fetch_add(1);
      return false;
    }
    if (!options_.admit_to_disk) return true;
    const std::vector<DisplacedBlock> displaced = disk_->DisplacedBy(header, pending);
    if (!displaced.empty() && !options_.admit_to_disk(header, displaced)) {
      dropped_by_admission_.fetch_add(1);
      return false;
    }
    return true;
  }

  bool Promotes(const Result<TieredHit>& hit) const {
    return hit.ok() && hit->tier == Tier::kDisk && host_ && options_.promote_on_hit;
  }

  // A disk hit to promote: its bytes were hashed as the disk tier read them into `out`
  // (a corrupt block is never a hit), so the host tier need not hash them again.
  static PutItem Promotion(const TieredHit& hit, std::span<const uint8_t> out) {
    return PutItem{hit.header, out.first(hit.header.payload_bytes), /*checksum_checked=*/true};
  }

  // Disk hits into the host tier in one put: room is made for all of them at once, so
  // the blocks they displace go down to disk in one batch.
  void Promote(std::span<const PutItem> promotions) {
    for (const Status& stored : Filling([&] { return host_->PutBatch(promotions); })) {
      if (stored.ok()) promoted_.fetch_add(1);  // told by on_stored
    }
  }

  // `fill` (a put into the tiers) under the shared mutex, as every put runs; then the
  // demoter is woken if the host tier is left short of the room it keeps.
  template <typename Fill>
  std::invoke_result_t<Fill&> Filling(Fill&& fill) {
    std::invoke_result_t<Fill&> result = [&] {
      ReaderLock lock(mu_);
      return fill();
    }();
    WakeDemoterIfShort();
    return result;
  }

  // After a put into the host tier: the demoter is woken when the room it keeps is short.
  void WakeDemoterIfShort() {
    if (!demoter_.joinable() || host_->FreeBytes() >= free_ahead_bytes_) return;
    {
      MutexLock lock(ahead_mu_);
      if (ahead_wanted_) return;
      ahead_wanted_ = true;
    }
    ahead_wanted_cv_.NotifyOne();
  }

  // The demoter's loop (free_ahead_bytes): woken by a put that left the host tier short
  // of the room, it moves the coldest blocks down until the room is free again. It holds
  // the store's shared mutex as a put does, so a removal waits for its demotions too.
  void KeepRoomAhead() {
    NameThisThread("kvt-demote");
    MutexLock lock(ahead_mu_);
    for (;;) {
      ahead_wanted_cv_.Wait(
          lock, [&]() KVTIER_REQUIRES(ahead_mu_) { return ahead_wanted_ || stopping_; });
      if (stopping_) return;
      ahead_wanted_ = false;
      lock.Unlock();
      {
        ReaderLock store_lock(mu_);
        host_->Reclaim(free_ahead_bytes_);
      }
      lock.Lock();
    }
  }

  static constexpr size_t kDemoteBatchBytes = 8 << 20;

  const TieredStoreOptions options_;
  std::unique_ptr<DiskTier> disk_;  // declared before host_: host evictions write to it
  std::unique_ptr<HostTier> host_;
  // Held whole by removals, shared by puts and promotions: a removal waits for the puts
  // in flight, so that no demotion brings a block back to disk after the removal deleted
  // it there.
  SharedMutex mu_;
  std::atomic<uint64_t> demoted_{0}, demoted_ahead_{0}, dropped_below_priority_{0},
      dropped_by_admission_{0}, promoted_{0}, onboarded_{0};
  // The demoter's wake-up (free_ahead_bytes), a mutex taken alone.
  Mutex ahead_mu_;
  CondVar ahead_wanted_cv_;
  bool ahead_wanted_ KVTIER_GUARDED_BY(ahead_mu_) = false;
  bool stopping_ KVTIER_GUARDED_BY(ahead_mu_) = false;
  uint64_t free_ahead_bytes_ = 0;  // whole host pages of options_.free_ahead_bytes; set by Open
  std::thread demoter_;            // none without free_ahead_bytes_; joined by ~Impl
};

Result<std::unique_ptr<TieredStore>> TieredStore::Create(TieredStoreOptions options) {
  if (!options.host && !options.disk)
    return InvalidArgumentError("a tiered store needs a host tier, a disk tier or both");
  if (options.host && (options.host->on_evict || options.host->on_stored ||
                       options.host->on_removed || options.host->on_evicted)) {
    return InvalidArgumentError(
        "host tier on_evict, on_stored, on_removed and on_evicted are the tiered store's own; "
        "leave them empty");
  }
  if (options.disk &&
      (options.disk->on_evict || options.disk->on_stored || options.disk->on_removed)) {
    return InvalidArgumentError(
        "disk tier on_evict, on_stored and on_removed are the tiered store's own; leave them "
        "empty");
  }
  auto impl = std::make_unique<Impl>(std::move(options));
  KVTIER_RETURN_IF_ERROR(impl->Open());
  return std::unique_ptr<TieredStore>(new TieredStore(std::move(impl)));
}

TieredStore::TieredStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TieredStore::~TieredStore() = default;
Status TieredStore::Put(const BlockHeader& header, std::span<const uint8_t> payload) {
  return impl_->Put(header, payload);
}
std::vector<Status> TieredStore::PutBatch(std::span<const PutItem> items, PutRoom room) {
  return room == PutRoom::kOwn ? impl_->PutBatchBehind(items) : impl_->PutBatch(items);
}
Status TieredStore::Flush() { return impl_->Flush(); }

Result<TieredHit> TieredStore::Get(const BlockRef& ref, std::span<uint8_t> out) {
  return impl_->Get(ref, out);
}
std::vector<Result<TieredHit>> TieredStore::GetBatch(std::span<const BlockRef> refs,
                                                     std::span<const std::span<uint8_t>> outs,
                                                     PromoteDiskHits promote) {
  return impl_->GetBatch(refs, outs, promote);
}
Result<PinnedBlock> TieredStore::HostPages::Pin(const BlockRef& ref) {
  return impl_->PinInHost(ref);
}
bool TieredStore::HostPages::can_lend() const { return impl_->CanLendHostPages(); }
Result<HostReservation> TieredStore::HostPages::Reserve(std::span<const BlockHeader> headers) {
  return impl_->ReserveInHost(headers);
}
std::vector<Status> TieredStore::HostPages::Commit(HostReservation reservation) {
  return impl_->CommitInHost(std::move(reservation));
}
Status TieredStore::HostPages::MoveOut(const BlockRef& ref) { return impl_->MoveOutOfHost(ref); }
Result<BlockHeader> TieredStore::Peek(const BlockRef& ref) { return impl_->Peek(ref); }
bool TieredStore::Contains(const BlockRef& ref) { return impl_->Peek(ref).ok(); }
Status TieredStore::Remove(const BlockRef& ref) { return impl_->Remove(ref); }
std::vector<std::pair<Tier, BlockHeader>> TieredStore::Holdings() const {
  return impl_->Holdings();
}
TieredStoreStats TieredStore::Stats() const { return impl_->Stats(); }

}  // namespace kvtier::storage
