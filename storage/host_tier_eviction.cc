// HostTier::Impl's making of room: eviction, and the hand-off of held victims to
// on_evict with the lock released (host_tier_impl.h).
#include <algorithm>
#include <vector>

#include "storage/host_tier_impl.h"

namespace kvtier::storage {

bool HostTier::Impl::MakeRoom(uint64_t pages) {
  while (slab_.FreePages(mu_) < pages) {
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

std::vector<HostTier::Impl::HeldVictim> HostTier::Impl::HoldVictimsLocked(uint64_t pages) {
  std::vector<HeldVictim> victims;
  for (uint64_t coming = slab_.FreePages(mu_); coming < pages;) {
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

void HostTier::Impl::HandOn(const std::vector<HeldVictim>& victims) const {
  std::vector<std::span<const uint8_t>> ranges;
  std::vector<size_t> first_range;
  first_range.reserve(victims.size() + 1);
  for (const HeldVictim& victim : victims) {
    first_range.push_back(ranges.size());
    slab_.AppendPages(victim.first, victim.header.payload_bytes, ranges);
  }
  first_range.push_back(ranges.size());
  std::vector<EvictedBlockView> views;
  views.reserve(victims.size());
  for (size_t k = 0; k < victims.size(); ++k) {
    views.push_back({&victims[k].header, std::span<const std::span<const uint8_t>>(ranges).subspan(
                                             first_range[k], first_range[k + 1] - first_range[k])});
  }
  options_.on_evict(views);
}

void HostTier::Impl::LeaveLocked(uint32_t victim) {
  ++stats_.evictions;
  ++stats_.evictions_by_priority[index_.EffectivePriority(victim)];
  if (options_.on_evicted) options_.on_evicted(index_.CurrentHeader(victim));
  EraseLocked(victim);
}

void HostTier::Impl::RemoveLocked(uint32_t id) {
  if (options_.on_removed) options_.on_removed(index_.CurrentHeader(id));
  EraseLocked(id);
}

void HostTier::Impl::EraseLocked(uint32_t id) {
  const auto first = static_cast<uint32_t>(index_.entry(id).location);
  index_.Erase(id);
  if (readers_[first] != 0) {
    readers_[first] |= kErased;  // its last reader frees the pages
  } else {
    slab_.Release(first, mu_);
  }
}

void HostTier::Impl::ReleaseReaderLocked(uint32_t first) {
  uint32_t& readers = readers_[first];
  if (--readers != kErased) return;  // others still read it, or it stays stored
  readers = 0;
  slab_.Release(first, mu_);
}

}  // namespace kvtier::storage
