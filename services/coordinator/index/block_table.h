// BlockTable: the index's blocks, by number and by key, and their location slots
// (internal to services/coordinator/index; the storage types are in index_storage.h).
//
// A block's first slot is inline in the block; further slots come from an overflow array
// and chain from it (LocationSlot::next_location). Blocks and overflow slots are reused
// through free lists. A slot's two counts (children_here, window_leaves) are 16 bits in
// the slot with the rare wide ones aside (SlotCounts). What the slots mean (held, absent,
// leaves, windows) is BlockIndex::Impl's: this class only stores them.
//
// Thread safety: none (owned by one BlockIndex). Slot references stay valid until the
// slot is freed; block numbers until the block is freed.
#pragma once

#include <cassert>
#include <cstdint>

#include "services/coordinator/index/block_index.h"
#include "services/coordinator/index/index_storage.h"

namespace kvtier::coordinator::internal {

class BlockTable {
 public:
  explicit BlockTable(size_t expected_blocks) : keys_(expected_blocks) {}

  Block& operator[](uint32_t b) { return blocks_[b]; }
  const Block& operator[](uint32_t b) const { return blocks_[b]; }
  // The block stored under `key`; kNil when none is.
  uint32_t Find(const BlockKey& key) const { return keys_.Find(key, blocks_); }
  size_t live() const { return live_; }

  // A new block under `parent` (kNil: a chain's root), which counts it as a child.
  // REQUIRES: no block has `key`.
  uint32_t NewBlock(const BlockKey& key, uint32_t parent, ScopeId scope) {
    uint32_t b;
    if (free_block_ != kNil) {
      b = free_block_;
      free_block_ = blocks_[b].parent;
      // The retention sequence carries on, one past the last block's here: a deadline
      // that block left behind must not match this block's first retention.
      const uint16_t next_seq = blocks_[b].retention_seq + 1;
      blocks_[b] = Block{};
      blocks_[b].retention_seq = next_seq;
    } else {
      b = static_cast<uint32_t>(blocks_.size());
      blocks_.emplace_back();
    }
    Block& block = blocks_[b];
    block.key = StoredKey::From(key);
    block.parent = parent;
    block.scope = scope;
    block.live = 1;
    if (parent != kNil) ++blocks_[parent].children;
    keys_.Insert(key, b, blocks_);
    ++live_;
    return b;
  }

  // Deletes block b with its overflow slots and returns its parent, which counts one
  // child fewer. REQUIRES: b has no children and holds no location.
  uint32_t FreeBlock(uint32_t b) {
    const uint32_t parent = blocks_[b].parent;
    for (uint32_t ref = blocks_[b].first.next_location; ref != kNil;) {
      const uint32_t next = Slot(ref).next_location;
      FreeOverflow(ref);
      ref = next;
    }
    keys_.Erase(blocks_[b].key.Key(), b, blocks_);
    blocks_[b].live = 0;
    blocks_[b].parent = free_block_;
    free_block_ = b;
    --live_;
    if (parent != kNil) --blocks_[parent].children;
    return parent;
  }

  LocationSlot& Slot(uint32_t ref) {
    return (ref & kOverflowRef) ? overflow_[ref & ~kOverflowRef].slot : blocks_[ref].first;
  }
  const LocationSlot& Slot(uint32_t ref) const {
    return (ref & kOverflowRef) ? overflow_[ref & ~kOverflowRef].slot : blocks_[ref].first;
  }
  // The block a slot belongs to.
  uint32_t Owner(uint32_t ref) const {
    return (ref & kOverflowRef) ? overflow_[ref & ~kOverflowRef].owner : ref;
  }

  uint32_t ChildrenHere(uint32_t ref) const {
    return CountOf(Slot(ref).children_here, wide_children_, ref);
  }
  uint32_t AddChildrenHere(uint32_t ref, int32_t delta) {
    return AddToCount(Slot(ref).children_here, wide_children_, ref, delta);
  }
  uint32_t WindowLeaves(uint32_t ref) const {
    return CountOf(Slot(ref).window_leaves, wide_window_leaves_, ref);
  }
  uint32_t AddWindowLeaves(uint32_t ref, int32_t delta) {
    return AddToCount(Slot(ref).window_leaves, wide_window_leaves_, ref, delta);
  }

  // Calls fn(ref) for every slot of block b that holds a location (not absent ones).
  template <typename Fn>
  void ForEachSlot(uint32_t b, Fn&& fn) const {
    for (uint32_t ref = b; ref != kNil; ref = Slot(ref).next_location) {
      if (IsHeld(Slot(ref).packed)) fn(ref);
    }
  }

  // The slot of b at `place`, held or absent; kNil when there is none.
  uint32_t FindSlot(uint32_t b, uint32_t place) const {
    for (uint32_t ref = b; ref != kNil; ref = Slot(ref).next_location) {
      const uint32_t packed = Slot(ref).packed;
      if (packed != kNoLocation && PlaceOf(packed) == place) return ref;
    }
    return kNil;
  }
  uint32_t FindHeldSlot(uint32_t b, uint32_t place) const {
    const uint32_t ref = FindSlot(b, place);
    return ref != kNil && IsHeld(Slot(ref).packed) ? ref : kNil;
  }
  bool HasLocation(uint32_t b) const {
    for (uint32_t ref = b; ref != kNil; ref = Slot(ref).next_location) {
      if (IsHeld(Slot(ref).packed)) return true;
    }
    return false;
  }

  // A new slot of block b holding `packed` (which may be absent), counts 0, in no list.
  uint32_t NewSlot(uint32_t b, uint32_t packed) {
    uint32_t ref;
    if (blocks_[b].first.packed == kNoLocation) {
      ref = b;
    } else {
      if (free_overflow_ != kNil) {
        ref = free_overflow_;
        free_overflow_ = Slot(ref).next_location;
      } else {
        ref = static_cast<uint32_t>(overflow_.size()) | kOverflowRef;
        overflow_.emplace_back();
      }
      overflow_[ref & ~kOverflowRef].owner = b;
      Slot(ref).next_location = blocks_[b].first.next_location;
      blocks_[b].first.next_location = ref;
    }
    Slot(ref).packed = packed;
    Slot(ref).children_here = 0;
    Slot(ref).window_leaves = 0;
    return ref;
  }

  // Returns a slot to the free state (an overflow slot to its free list).
  // REQUIRES: both its counts are 0 (nothing of them is left aside).
  void FreeSlot(uint32_t ref) {
    assert(ChildrenHere(ref) == 0 && WindowLeaves(ref) == 0);
    if (ref & kOverflowRef) {
      uint32_t prev = Owner(ref);  // unchain it from its block's slots
      while (Slot(prev).next_location != ref) prev = Slot(prev).next_location;
      Slot(prev).next_location = Slot(ref).next_location;
      FreeOverflow(ref);
    } else {
      Slot(ref).packed = kNoLocation;
    }
  }

  size_t memory_bytes() const {
    return blocks_.memory_bytes() + overflow_.memory_bytes() + keys_.memory_bytes() +
           wide_children_.memory_bytes() + wide_window_leaves_.memory_bytes();
  }

 private:
  void FreeOverflow(uint32_t ref) {
    OverflowSlot& o = overflow_[ref & ~kOverflowRef];
    o.owner = kNil;
    o.slot = LocationSlot{};
    o.slot.next_location = free_overflow_;
    free_overflow_ = ref;
  }

  PagedVector<Block> blocks_;
  uint32_t free_block_ = kNil;  // chained through Block::parent
  PagedVector<OverflowSlot> overflow_;
  uint32_t free_overflow_ = kNil;  // chained through LocationSlot::next_location
  KeyTable<PagedVector<Block>> keys_;
  SlotCounts wide_children_;
  SlotCounts wide_window_leaves_;
  size_t live_ = 0;
};

}  // namespace kvtier::coordinator::internal
