#include "storage/host_tier.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "common/thread_annotations.h"
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
        index_(options_.clock) {
    free_pages_.reserve(num_pages_);
    for (uint32_t page = num_pages_; page-- > 0;) free_pages_.push_back(page);
    stats_.capacity_bytes = uint64_t{num_pages_} * options_.page_bytes;
  }

  // Pages are taken under the lock, the payload copied in outside it (puts of different
  // blocks copy in parallel), and the block indexed under the lock again. Room is made
  // by evicting; with an on_evict handler its calls run outside the lock too (MakeRoom).
  // `checksum_checked`: as PutItem's.
  Status Put(const BlockHeader& header, std::span<const uint8_t> payload, bool checksum_checked) {
    KVTIER_RETURN_IF_ERROR(ValidatePut(header, payload, checksum_checked, options_.max_block_bytes));
    const uint64_t pages = PagesFor(header.payload_bytes);
    if (pages > num_pages_) {
      return ResourceExhaustedError("block of " + std::to_string(header.payload_bytes) +
                                    " bytes is larger than the whole host tier (" +
                                    std::to_string(stats_.capacity_bytes) + " bytes)");
    }
    uint32_t first = TierIndex::kNil;
    {
      std::unique_lock lock(mu_);
      ++stats_.puts;
      if (RefreshLocked(header)) return Status::Ok();
      if (const uint32_t id = index_.Find(header.key, header.format_tag); id != TierIndex::kNil) {
        return AlreadyExistsError("block " + header.key.ToHex() + " is stored under another salt scope");
      }
      if (!MakeRoom(pages, lock)) {  // what is left is being copied right now: a moment later there is room
        return ResourceExhaustedError("host tier: no room for " + std::to_string(header.payload_bytes) +
                                      " bytes while the rest is being read, written or evicted; retry");
      }
      first = TakePages(pages);
    }
    CopyIn(first, payload);
    std::lock_guard lock(mu_);
    if (index_.Find(header.key, header.format_tag) != TierIndex::kNil) {  // a concurrent put of it won
      ReleasePagesLocked(first);
      return RefreshLocked(header) ? Status::Ok()
                                   : AlreadyExistsError("block " + header.key.ToHex() +
                                                        " is stored under another salt scope");
    }
    stats_.bytes_written += header.payload_bytes;
    index_.Insert(header, pages, first);
    if (options_.on_stored) options_.on_stored(header);
    return Status::Ok();
  }

  // The block's pages are held under the lock (a reader count on its first page: an
  // eviction meanwhile leaves them to the last reader to free) and copied out outside it,
  // so that gets of different blocks copy in parallel.
  Result<BlockHeader> Get(const BlockRef& ref, std::span<uint8_t> out) {
    BlockHeader header;
    uint32_t first = TierIndex::kNil;
    {
      std::lock_guard lock(mu_);
      KVTIER_ASSIGN_OR_RETURN(const uint32_t id, FindLocked(ref));
      const TierIndex::Entry& entry = index_.entry(id);
      if (out.size() < entry.header.payload_bytes) {
        return InvalidArgumentError("buffer of " + std::to_string(out.size()) + " bytes is too small for block " +
                                    ref.key.ToHex() + " of " + std::to_string(entry.header.payload_bytes) + " bytes");
      }
      header = index_.CurrentHeader(id);
      first = static_cast<uint32_t>(entry.location);
      ++readers_[first];
      index_.Touch(id);
    }
    const std::span<uint8_t> payload = out.first(header.payload_bytes);
    CopyOut(first, payload);
    const bool corrupt = options_.verify_on_get && PayloadChecksum(payload) != header.checksum;
    std::lock_guard lock(mu_);
    ReleaseReaderLocked(first);
    if (corrupt) {
      ++stats_.checksum_failures;
      const uint32_t id = index_.Find(header.key, header.format_tag);
      if (id != TierIndex::kNil && index_.entry(id).location == first) RemoveLocked(id);
      return DataLossError("host tier: block " + ref.key.ToHex() + " failed its checksum; it was dropped");
    }
    ++stats_.hits;
    stats_.bytes_read += header.payload_bytes;
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
    RemoveLocked(id);
    return Status::Ok();
  }

  TierStats Stats() const {
    std::lock_guard lock(mu_);
    TierStats stats = stats_;
    stats.blocks = index_.size();
    stats.bytes = index_.units() * options_.page_bytes;
    stats.medium_bytes = stats_.capacity_bytes;  // the slab, taken whole at start
    return stats;
  }

  std::vector<BlockHeader> Headers() const {
    std::lock_guard lock(mu_);
    std::vector<BlockHeader> headers;
    headers.reserve(index_.size());
    index_.ForEach([&](uint32_t id) { headers.push_back(index_.CurrentHeader(id)); });
    return headers;
  }

  const HostMemory& memory() const { return *memory_; }

 private:
  static Status NotFound(const BlockRef& ref) {
    return NotFoundError("block " + ref.key.ToHex() + " (" + std::string(ref.format_tag) + ") is not in the host tier");
  }

  Result<uint32_t> FindLocked(const BlockRef& ref) KVTIER_REQUIRES(mu_) {
    const uint32_t id = index_.FindVisible(ref);
    if (id == TierIndex::kNil) {
      ++stats_.misses;
      return NotFound(ref);
    }
    return id;
  }

  uint64_t PagesFor(uint64_t bytes) const { return (bytes + options_.page_bytes - 1) / options_.page_bytes; }
  uint8_t* Page(uint32_t page) const { return memory_->data() + uint64_t{page} * options_.page_bytes; }

  uint32_t TakePages(uint64_t count) KVTIER_REQUIRES(mu_) {
    uint32_t first = TierIndex::kNil;
    for (uint64_t i = 0; i < count; ++i) {  // chained back to front: first is taken last
      const uint32_t page = free_pages_.back();
      free_pages_.pop_back();
      next_page_[page] = first;
      first = page;
    }
    return first;
  }

  // Outside the lock, by the holder of the chain's pages (a put that took them, or a
  // reader): nobody else writes their next_page_ entries or their bytes meanwhile.
  void CopyIn(uint32_t page, std::span<const uint8_t> payload) const {
    for (size_t at = 0; at < payload.size(); at += options_.page_bytes, page = next_page_[page]) {
      std::memcpy(Page(page), payload.data() + at, std::min<size_t>(options_.page_bytes, payload.size() - at));
    }
  }

  void CopyOut(uint32_t page, std::span<uint8_t> out) const {
    for (size_t at = 0; at < out.size(); at += options_.page_bytes, page = next_page_[page]) {
      std::memcpy(out.data() + at, Page(page), std::min<size_t>(options_.page_bytes, out.size() - at));
    }
  }

  // A stored block under this key and scope takes the new policy fields; true when there was one.
  bool RefreshLocked(const BlockHeader& header) KVTIER_REQUIRES(mu_) {
    const uint32_t id = index_.Find(header.key, header.format_tag);
    if (id == TierIndex::kNil || index_.entry(id).header.salt_scope != header.salt_scope) return false;
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
  bool MakeRoom(uint64_t pages, std::unique_lock<std::mutex>& lock) KVTIER_REQUIRES(mu_) {
    while (free_pages_.size() < pages) {
      if (!options_.on_evict) {
        const uint32_t victim = index_.Victim();
        if (victim == TierIndex::kNil) return false;
        LeaveLocked(victim);
        continue;
      }
      std::vector<HeldVictim> victims = HoldVictimsLocked(pages);
      if (victims.empty()) return false;
      lock.unlock();
      std::vector<std::span<const uint8_t>> ranges;
      for (const HeldVictim& victim : victims) options_.on_evict(victim.header, PayloadRanges(victim, ranges));
      lock.lock();
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
      victims.push_back(HeldVictim{index_.CurrentHeader(victim), static_cast<uint32_t>(entry.location)});
      coming += entry.units;
      index_.Hold(victim);
      ++readers_[victims.back().first];
    }
    return victims;
  }

  // The held victim's payload as its pages' byte ranges, in `ranges`' storage.
  std::span<const std::span<const uint8_t>> PayloadRanges(const HeldVictim& victim,
                                                         std::vector<std::span<const uint8_t>>& ranges) const {
    ranges.clear();
    uint32_t page = victim.first;
    for (uint64_t left = victim.header.payload_bytes; left > 0; page = next_page_[page]) {
      const uint64_t n = std::min<uint64_t>(left, options_.page_bytes);
      ranges.emplace_back(Page(page), n);
      left -= n;
    }
    return ranges;
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

  void ReleasePagesLocked(uint32_t first) KVTIER_REQUIRES(mu_) {
    for (uint32_t page = first; page != TierIndex::kNil;) {
      const uint32_t next = next_page_[page];
      free_pages_.push_back(page);
      page = next;
    }
  }

  const HostTierOptions options_;
  const std::unique_ptr<HostMemory> memory_;
  const uint32_t num_pages_;
  mutable std::mutex mu_;
  // A block's pages, chained. Written under mu_ when pages are taken; a chain is also read
  // without it by whoever holds its pages (CopyIn, CopyOut): distinct elements, no race.
  std::vector<uint32_t> next_page_;
  std::vector<uint32_t> free_pages_ KVTIER_GUARDED_BY(mu_);
  // Per first page of a stored block: the gets copying it out right now, with kErased set
  // when it was evicted or removed meanwhile (its last reader then frees the pages). A
  // vector, 4 bytes per page, so that a get allocates nothing.
  static constexpr uint32_t kErased = 1u << 31;
  std::vector<uint32_t> readers_ KVTIER_GUARDED_BY(mu_);
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
                                " bytes holds no page of " + std::to_string(options.page_bytes) + " bytes");
  }
  if (options.capacity_bytes / options.page_bytes >= TierIndex::kNil) {
    return InvalidArgumentError("host tier capacity of " + std::to_string(options.capacity_bytes) +
                                " bytes has too many pages; raise page_bytes");
  }
  const uint64_t bytes = options.capacity_bytes / options.page_bytes * options.page_bytes;
  KVTIER_ASSIGN_OR_RETURN(auto memory, HostMemory::Create(HostMemoryOptions{
                                           .bytes = bytes,
                                           .try_huge_pages = options.try_huge_pages,
                                           .populate = true,
                                           .pin = options.pin,
                                           .unpin = options.unpin}));
  return std::unique_ptr<HostTier>(new HostTier(std::make_unique<Impl>(std::move(options), std::move(memory))));
}

HostTier::HostTier(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HostTier::~HostTier() = default;
Status HostTier::Put(const BlockHeader& header, std::span<const uint8_t> payload) {
  return impl_->Put(header, payload, /*checksum_checked=*/false);
}
std::vector<Status> HostTier::PutBatch(std::span<const PutItem> items) {
  std::vector<Status> results;
  results.reserve(items.size());
  for (const PutItem& item : items) results.push_back(impl_->Put(item.header, item.payload, item.checksum_checked));
  return results;
}
Result<BlockHeader> HostTier::Get(const BlockRef& ref, std::span<uint8_t> out) { return impl_->Get(ref, out); }
Result<BlockHeader> HostTier::Peek(const BlockRef& ref) { return impl_->Peek(ref); }
Status HostTier::Remove(const BlockRef& ref) { return impl_->Remove(ref); }
TierStats HostTier::Stats() const { return impl_->Stats(); }
std::vector<BlockHeader> HostTier::Headers() const { return impl_->Headers(); }
bool HostTier::huge_pages() const { return impl_->memory().explicit_huge_pages(); }
bool HostTier::pinned() const { return impl_->memory().pinned(); }

}  // namespace kvtier::storage
