// HostTier::Impl: the host tier's state under its one mutex (the index, the readers of
// each block, reservations, statistics) over its page slab, and the policy that moves
// blocks in and out: puts, reads and reservations here, the making of room (eviction and
// its hand-off) in host_tier_eviction.cc; host_tier.cc is the public surface over it.
// Internal to storage/.
//
// Thread safety: as HostTier (storage/host_tier.h); every *Locked method and MakeRoom
// run under mu_, as annotated. Lock order: mu_ is a leaf, but MakeRoom lets it go while
// on_evict runs, and takes it again.
#pragma once

#include <algorithm>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "storage/host_tier.h"
#include "storage/page_slab.h"
#include "storage/tier_index.h"

namespace kvtier::storage {

class HostTier::Impl {
 public:
  Impl(HostTierOptions options, std::unique_ptr<HostMemory> memory)
      : options_(std::move(options)),
        slab_(std::move(memory), options_.page_bytes),
        num_pages_(slab_.pages()),
        readers_(num_pages_, 0),
        index_(options_.clock) {
    stats_.capacity_bytes = uint64_t{num_pages_} * options_.page_bytes;
  }

  // Pages for every new block of the batch are taken under the lock, room made for all
  // of them at once (with an on_evict handler, its call runs outside the lock: MakeRoom);
  // the payloads are copied in outside it (puts of different blocks copy in parallel),
  // and the blocks indexed under the lock again.
  std::vector<Status> PutBatch(std::span<const PutItem> items) {
    std::vector<Status> results(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      const PutItem& item = items[i];
      results[i] =
          ValidatePut(item.header, item.payload, item.checksum_checked, options_.max_block_bytes);
    }
    PutChecked(items, results, /*puts=*/items.size());
    return results;
  }

  // A block being read: its header and the first of its pages, which the reader holds.
  struct Held {
    BlockHeader header;
    uint32_t first = TierIndex::kNil;
  };

  // The block's pages are held under the lock (a reader count on its first page: an
  // eviction meanwhile leaves them to the last reader to free) and copied out outside it,
  // so that gets of different blocks copy in parallel.
  Result<BlockHeader> Get(const BlockRef& ref, std::span<uint8_t> out) {
    KVTIER_ASSIGN_OR_RETURN(Held held, Hold(ref, out.size()));
    const std::span<uint8_t> payload = out.first(held.header.payload_bytes);
    slab_.CopyOut(held.first, payload);
    const bool corrupt = options_.verify_on_get && PayloadChecksum(payload) != held.header.checksum;
    KVTIER_RETURN_IF_ERROR(EndRead(held, corrupt, /*keep_held=*/false));
    return std::move(held.header);
  }

  // As Get, but the pages stay held for the caller (PinnedBlock releases them: Unpin).
  Result<Held> Pin(const BlockRef& ref) {
    KVTIER_ASSIGN_OR_RETURN(Held held, Hold(ref, std::nullopt));
    const bool corrupt =
        options_.verify_on_get &&
        slab_.Checksum(held.first, held.header.payload_bytes) != held.header.checksum;
    KVTIER_RETURN_IF_ERROR(EndRead(held, corrupt, /*keep_held=*/true));
    return held;
  }

  void Unpin(uint32_t first, bool lent) {
    MutexLock lock(mu_);
    if (lent) slab_.Lend(first, mu_);
    ReleaseReaderLocked(first);
  }

  bool CanLend() const { return slab_.CanLend(); }

  // Pages for new blocks, taken under the lock with room made for all of them at once (as
  // PutChecked takes them); the caller writes them in place, then commits or abandons.
  Result<std::vector<uint32_t>> Reserve(std::span<const BlockHeader> headers) {
    uint64_t pages = 0;
    for (size_t i = 0; i < headers.size(); ++i) {
      KVTIER_RETURN_IF_ERROR(ValidateHeader(headers[i], options_.max_block_bytes)
                                 .WithContext("block " + std::to_string(i)));
      pages += slab_.PagesFor(headers[i].payload_bytes);
    }
    KVTIER_RETURN_IF_ERROR(NoBlockTwice(headers));
    if (pages > num_pages_) {
      return ResourceExhaustedError("blocks of " + std::to_string(pages * options_.page_bytes) +
                                    " bytes are more than the whole host tier (" +
                                    std::to_string(uint64_t{num_pages_} * options_.page_bytes) +
                                    " bytes)");
    }
    MutexLock lock(mu_);
    if (reserved_pages_ + pages > num_pages_ / 2) {
      return ResourceExhaustedError("host tier: reservations would hold " +
                                    std::to_string(reserved_pages_ + pages) + " of its " +
                                    std::to_string(num_pages_) +
                                    " pages, more than half; put the blocks instead, or retry");
    }
    for (const BlockHeader& header : headers) {
      if (index_.Find(header.key, header.format_tag) != TierIndex::kNil) {
        return FailedPreconditionError("block " + header.key.ToHex() +
                                       " is stored already: its put refreshes it");
      }
    }
    reserved_pages_ += pages;  // counted before MakeRoom lets the lock go: others see it meanwhile
    if (!MakeRoom(pages)) {
      reserved_pages_ -= pages;
      return ResourceExhaustedError(
          "host tier: no room for " + std::to_string(pages * options_.page_bytes) +
          " bytes while the rest is being read, written or evicted; retry");
    }
    std::vector<uint32_t> firsts;
    firsts.reserve(headers.size());
    for (const BlockHeader& header : headers)
      firsts.push_back(slab_.Take(slab_.PagesFor(header.payload_bytes), mu_));
    return firsts;
  }

  // Reserved blocks, filled: every one checked, then all indexed (or, one failing, none).
  std::vector<Status> Commit(std::span<const BlockHeader> headers,
                             std::span<const uint32_t> firsts) {
    std::vector<Status> results(headers.size());
    for (size_t i = 0; i < headers.size(); ++i) {
      if (slab_.Checksum(firsts[i], headers[i].payload_bytes) == headers[i].checksum) continue;
      results.assign(
          headers.size(),
          AbortedError("another block of the batch failed its checksum; none was stored"));
      results[i] = ChecksumMismatchError(headers[i]);
      Abandon(firsts);
      return results;
    }
    MutexLock lock(mu_);
    stats_.puts += headers.size();
    for (size_t i = 0; i < headers.size(); ++i) {
      const uint64_t pages = slab_.PagesFor(headers[i].payload_bytes);
      reserved_pages_ -= pages;
      results[i] = IndexLocked(headers[i], Placement{i, pages, firsts[i]});
    }
    return results;
  }

  void Abandon(std::span<const uint32_t> firsts) {
    MutexLock lock(mu_);
    for (uint32_t first : firsts) reserved_pages_ -= slab_.Release(first, mu_);
  }

  // By the holder of the block's pages (PageSlab::ForEachPiece).
  template <typename Piece>
  void ForEachPiece(uint32_t page, uint64_t bytes, const Piece& piece) const {
    slab_.ForEachPiece(page, bytes, piece);
  }

  Result<BlockHeader> Peek(const BlockRef& ref) {
    MutexLock lock(mu_);
    const uint32_t id = index_.FindVisible(ref);
    if (id == TierIndex::kNil) return NotFound();
    return index_.CurrentHeader(id);
  }

  Status Remove(const BlockRef& ref) {
    MutexLock lock(mu_);
    const uint32_t id = index_.FindVisible(ref);
    if (id == TierIndex::kNil) return NotFound();
    RemoveLocked(id);
    return Status::Ok();
  }

  TierStats Stats() const {
    MutexLock lock(mu_);
    TierStats stats = stats_;
    stats.blocks = index_.size();
    stats.bytes = index_.units() * options_.page_bytes;
    stats.medium_bytes = stats_.capacity_bytes;  // the slab, taken whole at start
    stats.lent_pages_replaced = slab_.lent_pages_replaced(mu_);
    return stats;
  }

  uint64_t Reclaim(uint64_t bytes) {
    MutexLock lock(mu_);
    MakeRoom(std::min<uint64_t>(slab_.PagesFor(bytes),
                                num_pages_));  // short of it when the rest is held: fine
    return uint64_t{slab_.FreePages(mu_)} * options_.page_bytes;
  }

  uint64_t FreeBytes() const {
    MutexLock lock(mu_);
    return uint64_t{slab_.FreePages(mu_)} * options_.page_bytes;
  }

  std::vector<BlockHeader> Headers() const {
    MutexLock lock(mu_);
    return index_.CurrentHeaders();
  }

  const HostMemory& memory() const { return slab_.memory(); }

 private:
  // A miss allocates nothing (a constant): batches miss by the thousand, and their
  // callers know which blocks they asked for.
  static Status NotFound() {
    static const std::string* const kMiss =
        MessageConstant("the block is not in the host tier under the format and scope asked for");
    return Status::Constant(StatusCode::kNotFound, kMiss);
  }

  // The block found, its pages held and it touched, under the lock; `room`: the caller's
  // buffer, which must hold the payload.
  Result<Held> Hold(const BlockRef& ref, std::optional<size_t> room) {
    MutexLock lock(mu_);
    KVTIER_ASSIGN_OR_RETURN(const uint32_t id, FindLocked(ref));
    const TierIndex::Entry& entry = index_.entry(id);
    if (room && *room < entry.header.payload_bytes) {
      return InvalidArgumentError("buffer of " + std::to_string(*room) +
                                  " bytes is too small for block " + ref.key.ToHex() + " of " +
                                  std::to_string(entry.header.payload_bytes) + " bytes");
    }
    const auto first = static_cast<uint32_t>(entry.location);
    ++readers_[first];
    index_.Touch(id);
    return Held{index_.CurrentHeader(id), first};
  }

  // After a read of a held block: counted as a hit, or, when it failed its checksum,
  // dropped (where the tier still has that copy) and reported as data loss. The pages stay
  // held only for a pin that succeeded.
  Status EndRead(const Held& held, bool corrupt, bool keep_held) {
    MutexLock lock(mu_);
    if (!keep_held || corrupt) ReleaseReaderLocked(held.first);
    if (corrupt) {
      ++stats_.checksum_failures;
      const uint32_t id = index_.Find(held.header.key, held.header.format_tag);
      if (id != TierIndex::kNil && index_.entry(id).location == held.first) RemoveLocked(id);
      return DataLossError("host tier: block " + held.header.key.ToHex() +
                           " failed its checksum; it was dropped");
    }
    ++stats_.hits;
    stats_.bytes_read += held.header.payload_bytes;
    return Status::Ok();
  }

  Result<uint32_t> FindLocked(const BlockRef& ref) KVTIER_REQUIRES(mu_) {
    const uint32_t id = index_.FindVisible(ref);
    if (id == TierIndex::kNil) {
      ++stats_.misses;
      return NotFound();
    }
    return id;
  }

  // A batch that names a block twice would write it twice: the second is a refresh.
  static Status NoBlockTwice(std::span<const BlockHeader> headers) {
    std::vector<std::pair<BlockKey, std::string_view>> names;
    names.reserve(headers.size());
    for (const BlockHeader& header : headers) names.emplace_back(header.key, header.format_tag);
    std::sort(names.begin(), names.end());
    const auto twice = std::adjacent_find(names.begin(), names.end());
    if (twice == names.end()) return Status::Ok();
    return FailedPreconditionError("block " + twice->first.ToHex() + " comes twice in the batch");
  }

  // A new block of a batch, and the pages it takes.
  struct Placement {
    size_t item = 0;
    uint64_t pages = 0;
    uint32_t first = TierIndex::kNil;
  };

  // `results`: the items' checks, kept where they failed and made the outcome elsewhere;
  // `puts`: what the batch adds to the put count. When room for the whole batch cannot be
  // made (every other page is being copied or evicted, or the batch is larger than the
  // tier), its new blocks go one by one.
  void PutChecked(std::span<const PutItem> items, std::span<Status> results, uint64_t puts) {
    std::vector<Placement> placed;
    placed.reserve(items.size());  // one allocation, however many blocks
    std::vector<size_t> repeats;   // items whose block an earlier item of the batch places
    {
      MutexLock lock(mu_);
      stats_.puts += puts;
      uint64_t pages = 0;
      for (size_t i = 0; i < items.size(); ++i) {
        if (!results[i].ok()) continue;
        if (PlacedEarlier(items, placed, items[i].header)) {
          repeats.push_back(i);
        } else {
          results[i] = PlaceLocked(items[i].header, i, placed, pages);
        }
      }
      if (placed.empty()) return;
      if (!MakeRoom(pages)) {
        if (placed.size() > 1) {
          lock.Unlock();
          for (const Placement& one : placed) {
            PutChecked(items.subspan(one.item, 1), results.subspan(one.item, 1), /*puts=*/0);
          }
          for (size_t i : repeats)
            PutChecked(items.subspan(i, 1), results.subspan(i, 1), /*puts=*/0);
          return;
        }
        // What is left is being copied right now: a moment later there is room.
        const Status no_room = ResourceExhaustedError(
            "host tier: no room for " + std::to_string(items[placed[0].item].header.payload_bytes) +
            " bytes while the rest is being read, written or evicted; retry");
        results[placed[0].item] = no_room;
        for (size_t i : repeats) results[i] = no_room;
        return;
      }
      for (Placement& p : placed) p.first = slab_.Take(p.pages, mu_);
    }
    for (const Placement& p : placed) slab_.CopyIn(p.first, items[p.item].payload);
    MutexLock lock(mu_);
    for (const Placement& p : placed) results[p.item] = IndexLocked(items[p.item].header, p);
    for (size_t i : repeats) {  // as if put after it: the policy of the later item
      if (!RefreshLocked(items[i].header)) {
        results[i] = AlreadyExistsError("block " + items[i].header.key.ToHex() +
                                        " is stored under another salt scope (or was not stored)");
      }
    }
  }

  static bool PlacedEarlier(std::span<const PutItem> items, const std::vector<Placement>& placed,
                            const BlockHeader& header) {
    return std::any_of(placed.begin(), placed.end(), [&](const Placement& p) {
      return items[p.item].header.key == header.key &&
             items[p.item].header.format_tag == header.format_tag;
    });
  }

  // A block already stored takes the new policy (OK); a new one joins `placed`.
  Status PlaceLocked(const BlockHeader& header, size_t item, std::vector<Placement>& placed,
                     uint64_t& pages) KVTIER_REQUIRES(mu_) {
    const uint64_t need = slab_.PagesFor(header.payload_bytes);
    if (need > num_pages_) {
      return ResourceExhaustedError("block of " + std::to_string(header.payload_bytes) +
                                    " bytes is larger than the whole host tier (" +
                                    std::to_string(stats_.capacity_bytes) + " bytes)");
    }
    if (RefreshLocked(header)) return Status::Ok();
    if (index_.Find(header.key, header.format_tag) != TierIndex::kNil) {
      return AlreadyExistsError("block " + header.key.ToHex() +
                                " is stored under another salt scope");
    }
    placed.push_back({item, need});
    pages += need;
    return Status::Ok();
  }

  // The copied-in block joins the index, unless a concurrent put of it won: then its pages
  // go back and it refreshes that one.
  Status IndexLocked(const BlockHeader& header, const Placement& p) KVTIER_REQUIRES(mu_) {
    if (index_.Find(header.key, header.format_tag) != TierIndex::kNil) {
      slab_.Release(p.first, mu_);
      return RefreshLocked(header) ? Status::Ok()
                                   : AlreadyExistsError("block " + header.key.ToHex() +
                                                        " is stored under another salt scope");
    }
    stats_.bytes_written += header.payload_bytes;
    index_.Insert(header, p.pages, p.first);
    if (options_.on_stored) options_.on_stored(header);
    return Status::Ok();
  }

  // A stored block under this key and scope takes the new policy fields; true when there was one.
  bool RefreshLocked(const BlockHeader& header) KVTIER_REQUIRES(mu_) {
    const uint32_t id = index_.Find(header.key, header.format_tag);
    if (id == TierIndex::kNil || index_.entry(id).header.salt_scope != header.salt_scope)
      return false;
    index_.Refresh(id, header);  // same key, same bytes: only the policy changes
    if (options_.on_stored) options_.on_stored(header);
    return true;
  }

  // Evicts until `pages` pages are free; false when it cannot (every other page is being
  // copied or evicted by another thread). Without an on_evict handler the victims leave
  // at once. With one, a put would otherwise hold the lock through the handler's work
  // (a demotion's disk write) and stall every get and put of the tier: the victims are
  // held instead (still readable, out of the eviction order, their pages pinned like a
  // reader's), handed to the handler with the lock released, and then leave.
  bool MakeRoom(uint64_t pages) KVTIER_REQUIRES(mu_);

  struct HeldVictim {
    BlockHeader header;  // as of when it was held
    uint32_t first = TierIndex::kNil;
  };

  // Holds victims until the free pages and theirs make `pages`, or none is left.
  std::vector<HeldVictim> HoldVictimsLocked(uint64_t pages) KVTIER_REQUIRES(mu_);

  // The held victims, each with its payload as its pages' byte ranges, to on_evict at once.
  void HandOn(const std::vector<HeldVictim>& victims) const;

  void LeaveLocked(uint32_t victim) KVTIER_REQUIRES(mu_);

  // A block leaving other than by eviction (a Remove, a corrupt copy dropped).
  void RemoveLocked(uint32_t id) KVTIER_REQUIRES(mu_);

  void EraseLocked(uint32_t id) KVTIER_REQUIRES(mu_);

  void ReleaseReaderLocked(uint32_t first) KVTIER_REQUIRES(mu_);

  const HostTierOptions options_;
  mutable Mutex mu_;
  // Its free list and lent pages under mu_ (passed to each call that needs it); a chain's
  // bytes and links by whoever holds the chain.
  PageSlab slab_;
  const uint32_t num_pages_;
  uint64_t reserved_pages_ KVTIER_GUARDED_BY(mu_) = 0;  // taken by reservations not yet committed
  // Per first page of a stored block: the gets copying it out right now, with kErased set
  // when it was evicted or removed meanwhile (its last reader then frees the pages). A
  // vector, 4 bytes per page, so that a get allocates nothing.
  static constexpr uint32_t kErased = 1u << 31;
  std::vector<uint32_t> readers_ KVTIER_GUARDED_BY(mu_);
  TierIndex index_ KVTIER_GUARDED_BY(mu_);
  TierStats stats_ KVTIER_GUARDED_BY(mu_);
};

}  // namespace kvtier::storage
