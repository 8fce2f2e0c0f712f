// KeySlots: a tier index's map from (format id, block key) to entry id, in one flat array.
//
// Open addressing with linear probing, at most 70% full, and backward-shift deletion (no
// tombstones: a lookup never walks past slots that were emptied). A lookup reads the
// slots from the key's home on, usually one cache line, where a node-based map read a
// bucket and then a node elsewhere (TierIndex's finds showed in a worker's profile:
// docs/history/benchmarks-2026-11.md#the-disk-tier-off-the-workers-path-2026-11-27-stop-41). No
// library here offers such a map (abseil's flat_hash_map is not among the project's Debian
// packages), so it is written out.
//
// Thread safety: none; its TierIndex is used under its tier's lock.
// REQUIRES: ids below kEmpty; a key is inserted only when absent.
#pragma once

#include <cstdint>
#include <vector>

#include "common/block_key.h"

namespace kvtier::storage {

class KeySlots {
 public:
  static constexpr uint32_t kEmpty = UINT32_MAX;

  // The id stored under (format, key), or kEmpty.
  uint32_t Find(uint32_t format, const BlockKey& key) const {
    if (count_ == 0) return kEmpty;
    for (size_t i = Home(format, key);; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.id == kEmpty) return kEmpty;
      if (slot.format == format && slot.key == key) return slot.id;
    }
  }

  void Insert(uint32_t format, const BlockKey& key, uint32_t id) {
    if ((count_ + 1) * 10 > slots_.size() * 7) Grow();
    Place(Slot{key, format, id});
    ++count_;
  }

  // Removes (format, key); false when it was not there.
  bool Erase(uint32_t format, const BlockKey& key) {
    if (count_ == 0) return false;
    size_t hole = Home(format, key);
    for (;; hole = (hole + 1) & mask_) {
      if (slots_[hole].id == kEmpty) return false;
      if (slots_[hole].format == format && slots_[hole].key == key) break;
    }
    // Shift back each later slot of the run whose home is not between the hole and it,
    // so that every key stays reachable from its home without a gap.
    for (size_t next = (hole + 1) & mask_; slots_[next].id != kEmpty; next = (next + 1) & mask_) {
      const size_t home = Home(slots_[next].format, slots_[next].key);
      const bool home_after_hole = ((next - home) & mask_) < ((next - hole) & mask_);
      if (home_after_hole) continue;
      slots_[hole] = slots_[next];
      hole = next;
    }
    slots_[hole].id = kEmpty;
    --count_;
    return true;
  }

  size_t size() const { return count_; }

  template <typename Fn>
  void ForEachId(Fn&& fn) const {
    for (const Slot& slot : slots_) {
      if (slot.id != kEmpty) fn(slot.id);
    }
  }

 private:
  struct Slot {
    BlockKey key;
    uint32_t format = 0;
    uint32_t id = kEmpty;
  };

  // Keys are mostly SHA-256 bits already (BlockKeyHash), but opaque ones need not be: the
  // multiply spreads every bit of the mix into the high bits taken.
  size_t Home(uint32_t format, const BlockKey& key) const {
    const uint64_t mixed = (BlockKeyHash{}(key) ^ (uint64_t{format} << 32)) * 0x9E3779B97F4A7C15ULL;
    return static_cast<size_t>(mixed >> shift_);
  }

  void Place(const Slot& slot) {
    size_t i = Home(slot.format, slot.key);
    while (slots_[i].id != kEmpty) i = (i + 1) & mask_;
    slots_[i] = slot;
  }

  void Grow() {
    std::vector<Slot> old = std::move(slots_);
    const size_t capacity = old.empty() ? 16 : old.size() * 2;
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    shift_ = 64 - static_cast<unsigned>(__builtin_ctzll(capacity));
    for (const Slot& slot : old) {
      if (slot.id != kEmpty) Place(slot);
    }
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  unsigned shift_ = 64;
  size_t count_ = 0;
};

}  // namespace kvtier::storage
