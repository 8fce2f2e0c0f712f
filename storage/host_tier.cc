#include "storage/host_tier.h"

#include <sys/mman.h>

#include <algorithm>
#include <cassert>
#include <cstring>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "storage/fast_xxh3.h"
#include "storage/tier_index.h"

namespace kvtier::storage {

class HostTier::Impl {
 public:
  Impl(HostTierOptions options, std::unique_ptr<HostMemory> memory)
      : options_(std::move(options)),
        memory_(std::move(memory)),
        num_pages_(static_cast<uint32_t>(options_.capacity_bytes / options_.page_bytes)),
        next_page_(num_pages_),
        readers_(num_pages_, 0),
        lent_(num_pages_, 0),
        index_(options_.clock) {
    free_pages_.reserve(num_pages_);
    for (uint32_t page = num_pages_; page-- > 0;) free_pages_.push_back(page);
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
    CopyOut(held.first, payload);
    const bool corrupt = options_.verify_on_get && PayloadChecksum(payload) != held.header.checksum;
    KVTIER_RETURN_IF_ERROR(EndRead(held, corrupt, /*keep_held=*/false));
    return std::move(held.header);
  }

  // As Get, but the pages stay held for the caller (PinnedBlock releases them: Unpin).
  Result<Held> Pin(const BlockRef& ref) {
    KVTIER_ASSIGN_OR_RETURN(Held held, Hold(ref, std::nullopt));
    const bool corrupt =
        options_.verify_on_get &&
        PiecesChecksum(held.first, held.header.payload_bytes) != held.header.checksum;
    KVTIER_RETURN_IF_ERROR(EndRead(held, corrupt, /*keep_held=*/true));
    return held;
  }

  void Unpin(uint32_t first, bool lent) {
    MutexLock lock(mu_);
    if (lent) {
      for (uint32_t page = first; page != TierIndex::kNil; page = next_page_[page]) lent_[page] = 1;
    }
    ReleaseReaderLocked(first);
  }

  // Pages can be lent when their memory can be replaced under them: a private anonymous
  // mapping of small pages. Not a slab pinned for DMA (the device would keep the old
  // pages) nor explicit huge pages (MADV_DONTNEED takes them whole).
  bool CanLend() const { return !memory_->pinned() && !memory_->explicit_huge_pages(); }

  // Pages for new blocks, taken under the lock with room made for all of them at once (as
  // PutChecked takes them); the caller writes them in place, then commits or abandons.
  Result<std::vector<uint32_t>> Reserve(std::span<const BlockHeader> headers) {
    uint64_t pages = 0;
    for (size_t i = 0; i < headers.size(); ++i) {
      KVTIER_RETURN_IF_ERROR(ValidateHeader(headers[i], options_.max_block_bytes)
                                 .WithContext("block " + std::to_string(i)));
      pages += PagesFor(headers[i].payload_bytes);
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
      firsts.push_back(TakePages(PagesFor(header.payload_bytes)));
    return firsts;
  }

  // Reserved blocks, filled: every one checked, then all indexed (or, one failing, none).
  std::vector<Status> Commit(std::span<const BlockHeader> headers,
                             std::span<const uint32_t> firsts) {
    std::vector<Status> results(headers.size());
    for (size_t i = 0; i < headers.size(); ++i) {
      if (PiecesChecksum(firsts[i], headers[i].payload_bytes) == headers[i].checksum) continue;
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
      const uint64_t pages = PagesFor(headers[i].payload_bytes);
      reserved_pages_ -= pages;
      results[i] = IndexLocked(headers[i], Placement{i, pages, firsts[i]});
    }
    return results;
  }

  void Abandon(std::span<const uint32_t> firsts) {
    MutexLock lock(mu_);
    for (uint32_t first : firsts) reserved_pages_ -= ReleasePagesLocked(first);
  }

  // By the holder of the block's pages (as CopyOut): runs of pages adjacent in the slab
  // go to `piece` as one. Writable for a reservation's holder, read-only for a pin's.
  template <typename Piece>
  void ForEachPiece(uint32_t page, uint64_t bytes, const Piece& piece) const {
    while (bytes > 0) {
      uint64_t run = std::min<uint64_t>(options_.page_bytes, bytes);
      uint8_t* start = Page(page);
      for (page = next_page_[page]; run < bytes && page == PageIndex(start + run);
           page = next_page_[page]) {
        run += std::min<uint64_t>(options_.page_bytes, bytes - run);
      }
      piece(std::span<uint8_t>(start, run));
      bytes -= run;
    }
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
    return stats;
  }

  uint64_t Reclaim(uint64_t bytes) {
    MutexLock lock(mu_);
    MakeRoom(std::min<uint64_t>(PagesFor(bytes),
                                num_pages_));  // short of it when the rest is held: fine
    return uint64_t{free_pages_.size()} * options_.page_bytes;
  }

  uint64_t FreeBytes() const {
    MutexLock lock(mu_);
    return uint64_t{free_pages_.size()} * options_.page_bytes;
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

  const HostMemory& memory() const { return *memory_; }

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

  // XXH3 of a held chain's payload, piece by piece: the same hash as PayloadChecksum.
  uint64_t PiecesChecksum(uint32_t first, uint64_t bytes) const {
    XXH3_state_t state;
    XXH3_64bits_reset(&state);
    ForEachPiece(first, bytes, [&](std::span<const uint8_t> piece) {
      XXH3_64bits_update(&state, piece.data(), piece.size());
    });
    return XXH3_64bits_digest(&state);
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

  uint64_t PagesFor(uint64_t bytes) const {
    return (bytes + options_.page_bytes - 1) / options_.page_bytes;
  }
  uint8_t* Page(uint32_t page) const {
    return memory_->data() + uint64_t{page} * options_.page_bytes;
  }
  // The page that starts at `at` (an address inside the slab or just past it).
  uint32_t PageIndex(const uint8_t* at) const {
    return static_cast<uint32_t>(static_cast<uint64_t>(at - memory_->data()) / options_.page_bytes);
  }

  // Chained in the order taken: a slab's free list starts in address order, so a block
  // put into fresh pages lies in one run (a pin then gives one piece).
  uint32_t TakePages(uint64_t count) KVTIER_REQUIRES(mu_) {
    uint32_t first = TierIndex::kNil;
    uint32_t* link = &first;
    for (uint64_t i = 0; i < count; ++i) {
      const uint32_t page = free_pages_.back();
      free_pages_.pop_back();
      if (lent_[page] != 0) ReplaceLentPage(page);
      *link = page;
      link = &next_page_[page];
    }
    *link = TierIndex::kNil;
    return first;
  }

  // Outside the lock, by the holder of the chain's pages (a put that took them, or a
  // reader): nobody else writes their next_page_ entries or their bytes meanwhile.
  void CopyIn(uint32_t page, std::span<const uint8_t> payload) const {
    for (size_t at = 0; at < payload.size(); at += options_.page_bytes, page = next_page_[page]) {
      std::memcpy(Page(page), payload.data() + at,
                  std::min<size_t>(options_.page_bytes, payload.size() - at));
    }
  }

  void CopyOut(uint32_t page, std::span<uint8_t> out) const {
    for (size_t at = 0; at < out.size(); at += options_.page_bytes, page = next_page_[page]) {
      std::memcpy(out.data() + at, Page(page),
                  std::min<size_t>(options_.page_bytes, out.size() - at));
    }
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
      for (Placement& p : placed) p.first = TakePages(p.pages);
    }
    for (const Placement& p : placed) CopyIn(p.first, items[p.item].payload);
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
    const uint64_t need = PagesFor(header.payload_bytes);
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
      ReleasePagesLocked(p.first);
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
  bool MakeRoom(uint64_t pages) KVTIER_REQUIRES(mu_) {
    while (free_pages_.size() < pages) {
      if (!options_.on_evict) {
        const uint32_t victim = index_.Victim();
        if (victim == TierIndex::kNil) return false;
        LeaveLocked(victim);
        continue;
      }
      std::vector<HeldVictim> victims = HoldVictimsLocked(pages);
      if (victims.empty()) return false;
      mu_.Unlock();  // the caller's lock, taken again before it sees it
      HandOn(victims);
      mu_.Lock();
      for (const HeldVictim& victim : victims) {
        // Still the block that was held, unless a Remove (or a failed checksum) took it meanwhile.
        const uint32_t id = index_.Find(victim.header.key, victim.header.format_tag);
        if (id != TierIndex::kNil && index_.entry(id).location == victim.first) LeaveLocked(id);
        ReleaseReaderLocked(victim.first);
      }
    }
    return true;
  }

  struct HeldVictim {
    BlockHeader header;  // as of when it was held
    uint32_t first = TierIndex::kNil;
  };

  // Holds victims until the free pages and theirs make `pages`, or none is left.
  std::vector<HeldVictim> HoldVictimsLocked(uint64_t pages) KVTIER_REQUIRES(mu_) {
    std::vector<HeldVictim> victims;
    for (uint64_t coming = free_pages_.size(); coming < pages;) {
      const uint32_t victim = index_.Victim();
      if (victim == TierIndex::kNil) break;
      const TierIndex::Entry& entry = index_.entry(victim);
      victims.push_back(
          HeldVictim{index_.CurrentHeader(victim), static_cast<uint32_t>(entry.location)});
      coming += entry.units;
      index_.Hold(victim);
      ++readers_[victims.back().first];
    }
    return victims;
  }

  // The held victims, each with its payload as its pages' byte ranges, to on_evict at once.
  void HandOn(const std::vector<HeldVictim>& victims) const {
    std::vector<std::span<const uint8_t>> ranges;
    std::vector<size_t> first_range;
    first_range.reserve(victims.size() + 1);
    for (const HeldVictim& victim : victims) {
      first_range.push_back(ranges.size());
      uint32_t page = victim.first;
      for (uint64_t left = victim.header.payload_bytes; left > 0; page = next_page_[page]) {
        const uint64_t n = std::min<uint64_t>(left, options_.page_bytes);
        ranges.emplace_back(Page(page), n);
        left -= n;
      }
    }
    first_range.push_back(ranges.size());
    std::vector<EvictedBlockView> views;
    views.reserve(victims.size());
    for (size_t k = 0; k < victims.size(); ++k) {
      views.push_back(
          {&victims[k].header, std::span<const std::span<const uint8_t>>(ranges).subspan(
                                   first_range[k], first_range[k + 1] - first_range[k])});
    }
    options_.on_evict(views);
  }

  void LeaveLocked(uint32_t victim) KVTIER_REQUIRES(mu_) {
    ++stats_.evictions;
    ++stats_.evictions_by_priority[index_.EffectivePriority(victim)];
    if (options_.on_evicted) options_.on_evicted(index_.CurrentHeader(victim));
    EraseLocked(victim);
  }

  // A block leaving other than by eviction (a Remove, a corrupt copy dropped).
  void RemoveLocked(uint32_t id) KVTIER_REQUIRES(mu_) {
    if (options_.on_removed) options_.on_removed(index_.CurrentHeader(id));
    EraseLocked(id);
  }

  void EraseLocked(uint32_t id) KVTIER_REQUIRES(mu_) {
    const auto first = static_cast<uint32_t>(index_.entry(id).location);
    index_.Erase(id);
    if (readers_[first] != 0) {
      readers_[first] |= kErased;  // its last reader frees the pages
    } else {
      ReleasePagesLocked(first);
    }
  }

  void ReleaseReaderLocked(uint32_t first) KVTIER_REQUIRES(mu_) {
    uint32_t& readers = readers_[first];
    if (--readers != kErased) return;  // others still read it, or it stays stored
    readers = 0;
    ReleasePagesLocked(first);
  }

  // A page that a zero-copy send lent (UnpinLent) may still be read by the kernel: the
  // socket's queues hold references to the page itself, not to our mapping. Writing it
  // would change bytes already sent. So the mapping gets a fresh zero page instead (a
  // private anonymous mapping: MADV_DONTNEED drops ours), and the old page lives on
  // until the kernel lets it go. Rare: lent pages come back unlent when the client says
  // it has read them.
  void ReplaceLentPage(uint32_t page) KVTIER_REQUIRES(mu_) {
    lent_[page] = 0;
    madvise(Page(page), options_.page_bytes,
            MADV_DONTNEED);  // cannot fail on our own anonymous pages
    ++stats_.lent_pages_replaced;
  }

  // Returns how many pages the chain had.
  uint64_t ReleasePagesLocked(uint32_t first) KVTIER_REQUIRES(mu_) {
    uint64_t released = 0;
    for (uint32_t page = first; page != TierIndex::kNil; ++released) {
      const uint32_t next = next_page_[page];
      free_pages_.push_back(page);
      page = next;
    }
    return released;
  }

  const HostTierOptions options_;
  const std::unique_ptr<HostMemory> memory_;
  const uint32_t num_pages_;
  mutable Mutex mu_;
  // A block's pages, chained. Written under mu_ when pages are taken; a chain is also read
  // without it by whoever holds its pages (CopyIn, CopyOut): distinct elements, no race.
  std::vector<uint32_t> next_page_;
  std::vector<uint32_t> free_pages_ KVTIER_GUARDED_BY(mu_);
  uint64_t reserved_pages_ KVTIER_GUARDED_BY(mu_) = 0;  // taken by reservations not yet committed
  // Per first page of a stored block: the gets copying it out right now, with kErased set
  // when it was evicted or removed meanwhile (its last reader then frees the pages). A
  // vector, 4 bytes per page, so that a get allocates nothing.
  static constexpr uint32_t kErased = 1u << 31;
  std::vector<uint32_t> readers_ KVTIER_GUARDED_BY(mu_);
  // Per page: 1 when a zero-copy send lent it and no client said it read the bytes
  // (ReplaceLentPage before it is written again).
  std::vector<uint8_t> lent_ KVTIER_GUARDED_BY(mu_);
  TierIndex index_ KVTIER_GUARDED_BY(mu_);
  TierStats stats_ KVTIER_GUARDED_BY(mu_);
};

Result<std::unique_ptr<HostTier>> HostTier::Create(HostTierOptions options) {
  if (options.page_bytes == 0 || options.page_bytes % 4096 != 0) {
    return InvalidArgumentError("host tier page_bytes " + std::to_string(options.page_bytes) +
                                " is not a positive multiple of 4096");
  }
  if (options.capacity_bytes < options.page_bytes) {
    return InvalidArgumentError("host tier capacity of " + std::to_string(options.capacity_bytes) +
                                " bytes holds no page of " + std::to_string(options.page_bytes) +
                                " bytes");
  }
  if (options.capacity_bytes / options.page_bytes >= TierIndex::kNil) {
    return InvalidArgumentError("host tier capacity of " + std::to_string(options.capacity_bytes) +
                                " bytes has too many pages; raise page_bytes");
  }
  const uint64_t bytes = options.capacity_bytes / options.page_bytes * options.page_bytes;
  KVTIER_ASSIGN_OR_RETURN(
      auto memory, HostMemory::Create(HostMemoryOptions{.bytes = bytes,
                                                        .try_huge_pages = options.try_huge_pages,
                                                        .populate = true,
                                                        .pin = options.pin,
                                                        .unpin = options.unpin}));
  return std::unique_ptr<HostTier>(
      new HostTier(std::make_unique<Impl>(std::move(options), std::move(memory))));
}

HostTier::HostTier(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HostTier::~HostTier() = default;
Status HostTier::Put(const BlockHeader& header, std::span<const uint8_t> payload) {
  const PutItem item{header, payload};
  return std::move(impl_->PutBatch({&item, 1}).front());
}
std::vector<Status> HostTier::PutBatch(std::span<const PutItem> items) {
  return impl_->PutBatch(items);
}
Result<BlockHeader> HostTier::Get(const BlockRef& ref, std::span<uint8_t> out) {
  return impl_->Get(ref, out);
}
Result<PinnedBlock> HostTier::Pin(const BlockRef& ref) {
  KVTIER_ASSIGN_OR_RETURN(Impl::Held held, impl_->Pin(ref));
  return PinnedBlock(this, held.first, std::move(held.header));
}
Result<BlockHeader> HostTier::Peek(const BlockRef& ref) { return impl_->Peek(ref); }
Status HostTier::Remove(const BlockRef& ref) { return impl_->Remove(ref); }
TierStats HostTier::Stats() const { return impl_->Stats(); }
uint64_t HostTier::Reclaim(uint64_t bytes) { return impl_->Reclaim(bytes); }
uint64_t HostTier::FreeBytes() const { return impl_->FreeBytes(); }
std::vector<BlockHeader> HostTier::Headers() const { return impl_->Headers(); }
bool HostTier::huge_pages() const { return impl_->memory().explicit_huge_pages(); }
bool HostTier::pinned() const { return impl_->memory().pinned(); }
bool HostTier::can_lend_pages() const { return impl_->CanLend(); }

PinnedBlock::PinnedBlock(PinnedBlock&& other) noexcept
    : tier_(std::exchange(other.tier_, nullptr)),
      first_page_(other.first_page_),
      header_(std::move(other.header_)) {}

PinnedBlock& PinnedBlock::operator=(PinnedBlock&& other) noexcept {
  if (this != &other) {
    if (tier_ != nullptr) tier_->impl_->Unpin(first_page_, /*lent=*/false);
    tier_ = std::exchange(other.tier_, nullptr);
    first_page_ = other.first_page_;
    header_ = std::move(other.header_);
  }
  return *this;
}

PinnedBlock::~PinnedBlock() {
  if (tier_ != nullptr) tier_->impl_->Unpin(first_page_, /*lent=*/false);
}

void PinnedBlock::UnpinLent() {
  if (tier_ != nullptr) tier_->impl_->Unpin(first_page_, /*lent=*/true);
  tier_ = nullptr;
}

Result<HostReservation> HostTier::Reserve(std::span<const BlockHeader> headers) {
  KVTIER_ASSIGN_OR_RETURN(std::vector<uint32_t> firsts, impl_->Reserve(headers));
  HostReservation reservation;
  reservation.tier_ = this;
  reservation.headers_.assign(headers.begin(), headers.end());
  reservation.first_pages_ = std::move(firsts);
  return reservation;
}

std::vector<Status> HostTier::Commit(HostReservation reservation) {
  assert(reservation.tier_ == this && "a reservation is committed to the tier that made it");
  std::vector<Status> results = impl_->Commit(reservation.headers_, reservation.first_pages_);
  reservation.tier_ = nullptr;  // its pages are the index's now, or given back
  return results;
}

HostReservation::HostReservation(HostReservation&& other) noexcept
    : tier_(std::exchange(other.tier_, nullptr)),
      headers_(std::move(other.headers_)),
      first_pages_(std::move(other.first_pages_)) {}

HostReservation& HostReservation::operator=(HostReservation&& other) noexcept {
  if (this != &other) {
    Release();
    tier_ = std::exchange(other.tier_, nullptr);
    headers_ = std::move(other.headers_);
    first_pages_ = std::move(other.first_pages_);
  }
  return *this;
}

HostReservation::~HostReservation() { Release(); }

void HostReservation::Release() {
  if (tier_ != nullptr) tier_->impl_->Abandon(first_pages_);
  tier_ = nullptr;
}

void HostReservation::ForEachPiece(size_t i,
                                   const std::function<void(std::span<uint8_t>)>& piece) const {
  if (tier_ != nullptr)
    tier_->impl_->ForEachPiece(first_pages_[i], headers_[i].payload_bytes, piece);
}

void PinnedBlock::ForEachPiece(const std::function<void(std::span<const uint8_t>)>& piece) const {
  if (tier_ != nullptr) tier_->impl_->ForEachPiece(first_page_, header_.payload_bytes, piece);
}

}  // namespace kvtier::storage
