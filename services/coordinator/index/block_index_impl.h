// BlockIndex::Impl: the state of the index and its slot, list and block primitives.
// Internal to services/coordinator/index; the operations are in block_index.cc.
#pragma once

#include <algorithm>
#include <functional>

#include "services/coordinator/index/block_index.h"
#include "services/coordinator/index/index_storage.h"

namespace kvtier::coordinator {

using internal::Block;
using internal::KeyTable;
using internal::PagedVector;
using internal::kNil;
using internal::kNoLocation;
using internal::kOverflowRef;
using internal::LocationSlot;
using internal::OverflowSlot;

namespace internal {

struct ListHead {
  uint32_t head = kNil;  // least recently used
  uint32_t tail = kNil;  // most recently used
};

// Prioritized LRU lists of one node: one list per (tier, priority).
struct NodeLists {
  std::array<std::array<ListHead, kMaxPriority + 1>, kTierCount> lists;
  std::array<size_t, kTierCount> held{};
};

struct ExpiryEntry {
  int64_t deadline_ns;
  uint32_t block;
  uint16_t seq;
  friend bool operator>(const ExpiryEntry& a, const ExpiryEntry& b) { return a.deadline_ns > b.deadline_ns; }
};

}  // namespace internal

using internal::ExpiryEntry;
using internal::ListHead;
using internal::NodeLists;

class BlockIndex::Impl {
 public:
  explicit Impl(const BlockIndexOptions& options)
      : options_(options), table_(options.expected_blocks) {}

  // ---- slots and lists -------------------------------------------------------------
  LocationSlot& Slot(uint32_t ref) {
    return (ref & kOverflowRef) ? overflow_[ref & ~kOverflowRef].slot : blocks_[ref].first;
  }
  const LocationSlot& Slot(uint32_t ref) const {
    return (ref & kOverflowRef) ? overflow_[ref & ~kOverflowRef].slot : blocks_[ref].first;
  }
  uint32_t Owner(uint32_t ref) const { return (ref & kOverflowRef) ? overflow_[ref & ~kOverflowRef].owner : ref; }

  // Calls fn(ref) for every slot of block b that holds a location (not absent ones).
  template <typename Fn>
  void ForEachSlot(uint32_t b, Fn&& fn) const {
    for (uint32_t ref = b; ref != kNil; ref = Slot(ref).next_location) {
      if (internal::IsHeld(Slot(ref).packed)) fn(ref);
    }
  }

  // The slot of b at `place`, held or absent; kNil when there is none.
  uint32_t FindSlot(uint32_t b, uint32_t place) const {
    for (uint32_t ref = b; ref != kNil; ref = Slot(ref).next_location) {
      const uint32_t packed = Slot(ref).packed;
      if (packed != kNoLocation && internal::PlaceOf(packed) == place) return ref;
    }
    return kNil;
  }

  uint32_t FindHeldSlot(uint32_t b, uint32_t place) const {
    const uint32_t ref = FindSlot(b, place);
    return ref != kNil && internal::IsHeld(Slot(ref).packed) ? ref : kNil;
  }

  bool HasLocation(uint32_t b) const {
    for (uint32_t ref = b; ref != kNil; ref = Slot(ref).next_location) {
      if (internal::IsHeld(Slot(ref).packed)) return true;
    }
    return false;
  }

  NodeLists& Lists(uint32_t node) {
    if (node >= nodes_.size()) nodes_.resize(node + 1);
    if (!nodes_[node]) nodes_[node] = std::make_unique<NodeLists>();
    return *nodes_[node];
  }

  // REQUIRES: the slot's node has lists (made by AddLocation before any slot is linked).
  ListHead& ListOf(uint32_t ref) {
    const uint32_t packed = Slot(ref).packed & ~internal::kAbsentBit;
    return nodes_[internal::PackedNode(packed)]->lists[internal::PackedTier(packed)][blocks_[Owner(ref)].priority];
  }

  void LinkTail(uint32_t ref) {
    ListHead& list = ListOf(ref);
    LocationSlot& slot = Slot(ref);
    slot.lru_prev = list.tail;
    slot.lru_next = kNil;
    if (list.tail != kNil) Slot(list.tail).lru_next = ref;
    else list.head = ref;
    list.tail = ref;
  }

  void Unlink(uint32_t ref) {
    ListHead& list = ListOf(ref);
    LocationSlot& slot = Slot(ref);
    if (slot.lru_prev != kNil) Slot(slot.lru_prev).lru_next = slot.lru_next;
    else list.head = slot.lru_next;
    if (slot.lru_next != kNil) Slot(slot.lru_next).lru_prev = slot.lru_prev;
    else list.tail = slot.lru_prev;
    slot.lru_prev = slot.lru_next = kNil;
  }

  void MoveToTail(uint32_t ref) {
    Unlink(ref);
    LinkTail(ref);
  }

  void SetPriority(uint32_t b, uint8_t priority) {
    if (blocks_[b].priority == priority) return;
    ForEachSlot(b, [&](uint32_t ref) { Unlink(ref); });
    blocks_[b].priority = priority;
    ForEachSlot(b, [&](uint32_t ref) { LinkTail(ref); });
  }

  // ---- blocks --------------------------------------------------------------------
  uint32_t NewBlock(const BlockKey& key, uint32_t parent, ScopeId scope) {
    uint32_t b;
    if (free_block_ != kNil) {
      b = free_block_;
      free_block_ = blocks_[b].parent;
      blocks_[b] = Block{};
    } else {
      b = static_cast<uint32_t>(blocks_.size());
      blocks_.emplace_back();
    }
    Block& block = blocks_[b];
    block.key = internal::StoredKey::From(key);
    block.parent = parent;
    block.scope = scope;
    block.live = 1;
    if (parent != kNil) ++blocks_[parent].children;
    table_.Insert(key, b, blocks_);
    ++live_blocks_;
    return b;
  }

  // Deletes b if it has neither locations nor children, then its parent likewise.
  void CollectIfUnused(uint32_t b) {
    while (b != kNil && blocks_[b].children == 0 && !HasLocation(b)) {
      const uint32_t parent = blocks_[b].parent;
      for (uint32_t ref = blocks_[b].first.next_location; ref != kNil;) {
        const uint32_t next = Slot(ref).next_location;
        FreeOverflow(ref);
        ref = next;
      }
      table_.Erase(blocks_[b].key.Key(), blocks_);
      blocks_[b].live = 0;
      blocks_[b].parent = free_block_;
      free_block_ = b;
      --live_blocks_;
      if (parent != kNil) --blocks_[parent].children;
      b = parent;
    }
  }

  void FreeOverflow(uint32_t ref) {
    OverflowSlot& o = overflow_[ref & ~kOverflowRef];
    o.owner = kNil;
    o.slot = LocationSlot{};
    o.slot.next_location = free_overflow_;
    free_overflow_ = ref;
  }

  // Returns the new slot, not yet in its LRU list: the caller links it (LinkTail).
  // REQUIRES: b holds nothing at the place of `packed`.
  uint32_t AddLocation(uint32_t b, uint32_t packed) {
    uint32_t ref = FindSlot(b, internal::PlaceOf(packed));
    if (ref != kNil) {
      Slot(ref).packed = packed;  // an absent slot comes back with its children's count
    } else {
      ref = NewSlot(b, packed);
    }
    ++Lists(internal::PackedNode(packed)).held[internal::PackedTier(packed)];
    ++locations_;
    if (const uint32_t parent = blocks_[b].parent; parent != kNil) {
      uint32_t pref = FindSlot(parent, internal::PlaceOf(packed));
      // The parent is not at this place (a child offloaded before it): an absent slot
      // keeps the count, so the parent is interior here as soon as it arrives.
      if (pref == kNil) pref = NewSlot(parent, (packed & ~0xFFFFu) | internal::kAbsentBit);
      ++Slot(pref).children_here;
    }
    return ref;
  }

  // A new slot of block b holding `packed` (which may be absent), not in any list.
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
    return ref;
  }

  // Drops the location of a held slot; the block is collected when nothing keeps it.
  void RemoveLocation(uint32_t ref) {
    const uint32_t b = Owner(ref);
    const uint32_t packed = Slot(ref).packed;
    Unlink(ref);
    --nodes_[internal::PackedNode(packed)]->held[internal::PackedTier(packed)];
    --locations_;
    if (const uint32_t parent = blocks_[b].parent; parent != kNil) {
      const uint32_t pref = FindSlot(parent, internal::PlaceOf(packed));
      if (pref != kNil && Slot(pref).children_here > 0 && --Slot(pref).children_here == 0 &&
          !internal::IsHeld(Slot(pref).packed)) {
        FreeSlot(pref);  // an absent slot whose last child here is gone
        CollectIfUnused(parent);
      }
    }
    if (Slot(ref).children_here > 0) {
      Slot(ref).packed = packed | internal::kAbsentBit;  // keep the count for a comeback
      return;
    }
    FreeSlot(ref);
    CollectIfUnused(b);
  }

  // Returns a slot to the free state (overflow slots to their free list).
  void FreeSlot(uint32_t ref) {
    const uint32_t b = Owner(ref);
    if (ref & kOverflowRef) {
      // Unchain it from the block's slot list.
      uint32_t prev = b;
      while (Slot(prev).next_location != ref) prev = Slot(prev).next_location;
      Slot(prev).next_location = Slot(ref).next_location;
      FreeOverflow(ref);
    } else {
      Slot(ref).packed = kNoLocation;
      Slot(ref).children_here = 0;
    }
  }

  void SetRetention(uint32_t b, const BlockRetention& retention) {
    SetPriority(b, retention.priority);
    Block& block = blocks_[b];
    ++block.retention_seq;  // any older deadline of this block is void
    if (retention.duration.count() > 0 && retention.priority != kDefaultPriority) {
      expiry_.push({(options_.clock->Now() + retention.duration).count(), b, block.retention_seq});
    }
  }

  Status Store(const StoreRequest& r);
  Status ValidateStore(const StoreRequest& r, uint32_t parent);
  LookupResult Lookup(ScopeId scope, std::span<const BlockKey> keys) const;
  void Touch(NodeId node, ScopeId scope, std::span<const BlockKey> keys);
  std::vector<BlockKey> Evict(NodeId node, Tier tier, size_t count, const Location* demote_to = nullptr,
                              const std::function<bool(const BlockKey&)>* admit = nullptr,
                              std::vector<BlockKey>* demoted = nullptr);
  size_t Remove(NodeId node, Tier tier, std::span<const BlockKey> keys);
  size_t RemoveNode(NodeId node);
  uint32_t HeldSlotOf(const BlockKey& key, uint32_t place) const;  // kNil when not held there
  size_t ChangeTier(NodeId node, Tier from, Location to, std::span<const BlockKey> keys);
  void AdvanceTime();
  BlockIndexStats Stats() const;
  size_t Held(NodeId node, Tier tier) const {
    return node < nodes_.size() && nodes_[node] ? nodes_[node]->held[static_cast<int>(tier)] : 0;
  }

  BlockIndexOptions options_;
  internal::PagedVector<Block> blocks_;
  uint32_t free_block_ = kNil;
  internal::PagedVector<OverflowSlot> overflow_;
  uint32_t free_overflow_ = kNil;
  KeyTable<internal::PagedVector<Block>> table_;
  std::vector<std::unique_ptr<NodeLists>> nodes_;
  std::vector<uint32_t> scratch_;        // reused by Store and Touch
  std::vector<uint32_t> found_;          // Store: each key's block from validation
  std::priority_queue<ExpiryEntry, std::vector<ExpiryEntry>, std::greater<>> expiry_;
  size_t live_blocks_ = 0;
  size_t locations_ = 0;
  uint64_t expirations_ = 0;
  std::array<uint64_t, kMaxPriority + 1> evictions_by_priority_{};
};

}  // namespace kvtier::coordinator
