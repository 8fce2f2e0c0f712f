// Compact storage behind BlockIndex (internal): blocks in one vector, an open-addressing
// key table of 4-byte slots, location slots that double as LRU-list links.
//
// Why hand-written: a std::unordered_map<BlockKey, Block> costs ~40 bytes of node and
// bucket overhead per block on top of the block itself, and the index's goal is at most
// 64 bytes per block in total. Here a block is 52 bytes and its key-table slot 4 bytes at
// load factor <= 0.8, and the common case (one location) needs no other allocation.
//
// Thread safety: none (owned by one BlockIndex).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/block_key.h"
#include "common/block_vocabulary.h"

namespace kvtier::coordinator::internal {

inline constexpr uint32_t kNil = UINT32_MAX;
// Slot references: an index into blocks (the block's inline first slot) or, with this
// bit set, into the overflow slots.
inline constexpr uint32_t kOverflowRef = 1u << 31;
inline constexpr uint32_t kNoLocation = UINT32_MAX;

// A slot whose location was removed while children are still held at its place: it keeps
// their count (so leaf tracking stays exact if the block comes back) but is no location.
inline constexpr uint32_t kAbsentBit = 1u << 31;

// node: 12 bits (kMaxNodes 4096), tier: 2 bits, pool: 16 bits.
inline uint32_t PackLocation(uint32_t node, uint32_t tier, uint32_t pool) {
  return node << 18 | tier << 16 | pool;
}
inline uint32_t PackedNode(uint32_t packed) { return packed >> 18; }
inline uint32_t PackedTier(uint32_t packed) { return (packed >> 16) & 3; }
inline uint32_t PackedPool(uint32_t packed) { return packed & 0xFFFF; }
// A place is one pool of one tier of one node (the location without the absent bit): what
// leaf tracking and windows are kept by. LRU lists and capacity are per node and tier.
inline uint32_t PlaceOf(uint32_t packed) { return packed & ~kAbsentBit; }
inline bool IsHeld(uint32_t packed) { return packed != kNoLocation && (packed & kAbsentBit) == 0; }

// The two counts of a slot are narrow (CountOf, AddToCount): 16 bits in the slot, with
// the rare count past 65,534 in a side table.
struct LocationSlot {  // 20 bytes
  uint32_t packed = kNoLocation;
  uint32_t lru_prev = kNil;  // neighbours in the (node, tier, priority) LRU list
  uint32_t lru_next = kNil;
  uint32_t next_location = kNil;  // the block's next slot reference
  uint16_t children_here = 0;     // children of the block held at the same place
  uint16_t window_leaves = 0;     // windowed places: leaves held 1 to W - 1 blocks below
};

// A BlockKey stored as 4-byte words: BlockKey's 8-byte alignment would pad Block by 4.
struct StoredKey {
  uint32_t words[4];
  static StoredKey From(const BlockKey& k) {
    return {{static_cast<uint32_t>(k.hi), static_cast<uint32_t>(k.hi >> 32),
             static_cast<uint32_t>(k.lo), static_cast<uint32_t>(k.lo >> 32)}};
  }
  BlockKey Key() const {
    return {uint64_t{words[1]} << 32 | words[0], uint64_t{words[3]} << 32 | words[2]};
  }
  bool operator==(const BlockKey& k) const { return Key() == k; }
};

// Last access is not a field: recency is each location's position in its LRU list, which
// is all that eviction needs, and 4 bytes less per block.
struct Block {  // 52 bytes
  StoredKey key;
  uint32_t parent = kNil;  // kNil: the chain's root; doubles as the free-list link
  uint32_t children = 0;   // child blocks in the index
  uint16_t hits = 0;       // saturating
  // Matches the live expiry-heap entry; carried on when the slot is reused. 16 bits: a
  // stale entry matches again only after 65,536 retention changes of one slot before its
  // deadline (then a priority reverts early), which keeps the block at 52 bytes.
  uint16_t retention_seq = 0;
  uint16_t scope = 0;
  uint8_t priority = kDefaultPriority;
  uint8_t live = 0;
  LocationSlot first;
};
static_assert(sizeof(LocationSlot) == 20);
static_assert(sizeof(Block) == 52);

struct OverflowSlot {
  LocationSlot slot;
  uint32_t owner = kNil;  // block index; kNil while on the free list
};

// A vector of T in pages of 1024: growth adds a page instead of doubling (so memory tracks
// use within one page), and elements never move.
template <typename T>
class PagedVector {
 public:
  static constexpr size_t kPageBits = 10;
  static constexpr size_t kPageSize = size_t{1} << kPageBits;

  T& operator[](size_t i) { return pages_[i >> kPageBits][i & (kPageSize - 1)]; }
  const T& operator[](size_t i) const { return pages_[i >> kPageBits][i & (kPageSize - 1)]; }
  size_t size() const { return size_; }
  T& emplace_back() {
    if (size_ == pages_.size() * kPageSize) pages_.push_back(std::make_unique<T[]>(kPageSize));
    return (*this)[size_++];
  }
  size_t memory_bytes() const { return pages_.size() * (kPageSize * sizeof(T) + sizeof(void*)); }

 private:
  std::vector<std::unique_ptr<T[]>> pages_;
  size_t size_ = 0;
};

// The key table's default hash: a key's home is a multiply-shift of this.
struct KeyTableHash {
  uint64_t operator()(const BlockKey& key) const {
    const uint64_t h = key.hi * 0x9E3779B97F4A7C15ULL ^ key.lo * 0xC2B2AE3D27D4EB4FULL;
    return h ^ (h >> 31);
  }
};

// Key -> block index; linear probing with backward-shift deletion (no tombstones). The
// table has any size (a key's home is a multiply-shift of its hash, not a mask), so it is
// sized to the expected block count at load 0.8 instead of the next power of two, and
// grows by half when full.
//
// A slot is 4 bytes: the block index in the low 27 bits and, in the top 5, the entry's
// distance from its home slot (31: 31 or more). Why: the keys live in the blocks, and
// reading one is a cache miss per probe. With the distance in the slot, a probe reads a
// block's key only where the slot's distance says the entry shares the sought key's home
// (about one in a run at load 0.8), and deletion finds each later entry's home without
// reading its key. This caps an index at kMaxKeyTableBlocks (134 M) blocks.
inline constexpr uint32_t kKeyTableIndexBits = 27;
inline constexpr uint32_t kMaxKeyTableBlocks = (1u << kKeyTableIndexBits) - 1;

template <typename Blocks, typename Hash = KeyTableHash>
class KeyTable {
 public:
  explicit KeyTable(size_t expected) {
    slots_.assign(std::max<size_t>(16, expected * 5 / 4 + 1), kNil);
  }

  uint32_t Find(const BlockKey& key, const Blocks& blocks) const {
    const size_t home = Home(key);
    for (size_t i = home, distance = 0;; i = Next(i), ++distance) {
      const uint32_t s = slots_[i];
      if (s == kNil) return kNil;
      if (StoredDistance(s) == CappedDistance(distance) && blocks[BlockOf(s)].key == key)
        return BlockOf(s);
    }
  }

  // REQUIRES: `key` is absent; block < kMaxKeyTableBlocks.
  void Insert(const BlockKey& key, uint32_t block, const Blocks& blocks) {
    if ((count_ + 1) * 5 > slots_.size() * 4) Grow(blocks);
    Place(Home(key), block);
    ++count_;
  }

  // Removes the entry of `block`, whose key is `key`. The probe compares block indices,
  // never keys: it reads no block, where comparing keys cost a cache miss per candidate.
  // REQUIRES: `key` is present, as the key of `block`.
  void Erase(const BlockKey& key, uint32_t block, const Blocks& blocks) {
    size_t hole = Home(key);
    while (BlockOf(slots_[hole]) != block) hole = Next(hole);
    // Shift back every later entry of the probe run whose home is at or before the hole.
    for (size_t j = Next(hole); slots_[j] != kNil; j = Next(j)) {
      const size_t distance = DistanceFromHome(j, blocks);
      const size_t gap = j >= hole ? j - hole : j + slots_.size() - hole;
      if (distance >= gap) {
        slots_[hole] = Pack(BlockOf(slots_[j]), distance - gap);
        hole = j;
      }
    }
    slots_[hole] = kNil;
    --count_;
  }

  size_t size() const { return count_; }
  size_t memory_bytes() const { return slots_.capacity() * sizeof(uint32_t); }

 private:
  static constexpr uint32_t kDistanceCap = (1u << (32 - kKeyTableIndexBits)) - 1;

  static uint32_t BlockOf(uint32_t slot) { return slot & kMaxKeyTableBlocks; }
  static uint32_t StoredDistance(uint32_t slot) { return slot >> kKeyTableIndexBits; }
  static uint32_t CappedDistance(size_t distance) {
    return static_cast<uint32_t>(std::min<size_t>(distance, kDistanceCap));
  }
  static uint32_t Pack(uint32_t block, size_t distance) {
    return CappedDistance(distance) << kKeyTableIndexBits | block;
  }

  // The distance of slot j's entry from its home; reads its key only past the cap.
  size_t DistanceFromHome(size_t j, const Blocks& blocks) const {
    const uint32_t s = slots_[j];
    if (StoredDistance(s) < kDistanceCap) return StoredDistance(s);
    const size_t home = Home(blocks[BlockOf(s)].key.Key());
    return j >= home ? j - home : j + slots_.size() - home;
  }

  void Place(size_t home, uint32_t block) {
    size_t i = home, distance = 0;
    for (; slots_[i] != kNil; i = Next(i)) ++distance;
    slots_[i] = Pack(block, distance);
  }

  size_t Home(const BlockKey& key) const {
    return static_cast<size_t>((static_cast<unsigned __int128>(Hash{}(key)) * slots_.size()) >> 64);
  }
  size_t Next(size_t i) const { return i + 1 == slots_.size() ? 0 : i + 1; }

  void Grow(const Blocks& blocks) {
    std::vector<uint32_t> old;
    old.swap(slots_);
    slots_.assign(old.size() + old.size() / 2, kNil);
    for (uint32_t s : old) {
      if (s != kNil) Place(Home(blocks[BlockOf(s)].key.Key()), BlockOf(s));
    }
  }

  std::vector<uint32_t> slots_;
  size_t count_ = 0;
};

// Slot reference -> count: the slots' counts too wide for their 16 bits (AddToCount).
// Why hand-written: std::unordered_map costs about 40 bytes per entry (a node and a
// bucket pointer); this is 8 bytes per entry at load <= 0.8, with the same linear probing
// and backward-shift deletion as KeyTable. Grows by half; never shrinks.
class SlotCounts {
 public:
  bool Contains(uint32_t key) const { return Find(key) != kNil; }
  uint32_t Get(uint32_t key) const {
    const size_t i = Find(key);
    return i == kNil ? 0 : entries_[i].count;
  }

  void Add(uint32_t key, uint32_t n) {
    if ((count_ + 1) * 5 > entries_.size() * 4) Grow();
    size_t i = Home(key);
    while (entries_[i].key != kNil && entries_[i].key != key) i = Next(i);
    if (entries_[i].key == kNil) {
      entries_[i].key = key;
      ++count_;
    }
    entries_[i].count += n;
  }

  // Takes n off the key's count and returns what is left; the entry goes at 0.
  // REQUIRES: the key is present with a count of at least n.
  uint32_t Subtract(uint32_t key, uint32_t n) {
    size_t hole = Find(key);
    const uint32_t left = entries_[hole].count -= n;
    if (left != 0) return left;
    for (size_t j = Next(hole); entries_[j].key != kNil; j = Next(j)) {
      const size_t home = Home(entries_[j].key);
      const bool home_in_gap = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
      if (!home_in_gap) {
        entries_[hole] = entries_[j];
        hole = j;
      }
    }
    entries_[hole] = Entry{};
    --count_;
    return 0;
  }

  size_t size() const { return count_; }
  size_t memory_bytes() const { return entries_.capacity() * sizeof(Entry); }

 private:
  struct Entry {
    uint32_t key = kNil;
    uint32_t count = 0;
  };

  size_t Find(uint32_t key) const {
    if (entries_.empty()) return kNil;
    for (size_t i = Home(key);; i = Next(i)) {
      if (entries_[i].key == key) return i;
      if (entries_[i].key == kNil) return kNil;
    }
  }
  size_t Home(uint32_t key) const {
    const uint64_t h = uint64_t{key} * 0x9E3779B97F4A7C15ULL;
    return static_cast<size_t>((static_cast<unsigned __int128>(h ^ (h >> 29)) * entries_.size()) >>
                               64);
  }
  size_t Next(size_t i) const { return i + 1 == entries_.size() ? 0 : i + 1; }

  void Grow() {
    std::vector<Entry> old;
    old.swap(entries_);
    entries_.assign(std::max<size_t>(16, old.size() + old.size() / 2), Entry{});
    for (const Entry& e : old) {
      if (e.key == kNil) continue;
      size_t i = Home(e.key);
      while (entries_[i].key != kNil) i = Next(i);
      entries_[i] = e;
    }
  }

  std::vector<Entry> entries_;
  size_t count_ = 0;
};

// A slot's count held in 16 bits, with the counts of 65,535 and more in `wide` under the
// slot's reference (the slot then holds kWideCount). Why: the windowed pools' leaf counts
// in a side table took 7 bytes per indexed block (W = 16) against the 64-byte goal, and
// counts that large need a pool of over 65,535 blocks under one block.
inline constexpr uint16_t kWideCount = UINT16_MAX;

inline uint32_t CountOf(uint16_t narrow, const SlotCounts& wide, uint32_t ref) {
  return narrow == kWideCount ? wide.Get(ref) : narrow;
}

// Adds `delta` and returns the new count. REQUIRES: the count stays >= 0.
inline uint32_t AddToCount(uint16_t& narrow, SlotCounts& wide, uint32_t ref, int32_t delta) {
  const uint32_t was = CountOf(narrow, wide, ref);
  const uint32_t now = static_cast<uint32_t>(static_cast<int64_t>(was) + delta);
  if (narrow == kWideCount) wide.Subtract(ref, was);  // the entry goes; back below if still wide
  if (now < kWideCount) {
    narrow = static_cast<uint16_t>(now);
  } else {
    narrow = kWideCount;
    wide.Add(ref, now);
  }
  return now;
}

}  // namespace kvtier::coordinator::internal
