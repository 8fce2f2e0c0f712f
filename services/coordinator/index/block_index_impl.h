// BlockIndex::Impl: the state of the index and its slot, list and block primitives.
// Internal to services/coordinator/index; the operations are in block_index.cc.
#pragma once

#include <algorithm>
#include <cassert>
#include <functional>
#include <optional>
#include <span>

#include "common/deadline_heap.h"
#include "services/coordinator/index/block_index.h"
#include "services/coordinator/index/block_tokens.h"
#include "services/coordinator/index/index_storage.h"

namespace kvtier::coordinator {

using internal::Block;
using internal::KeyTable;
using internal::kNil;
using internal::kNoLocation;
using internal::kOverflowRef;
using internal::LocationSlot;
using internal::OverflowSlot;
using internal::PagedVector;

namespace internal {

struct ListHead {
  uint32_t head = kNil;  // least recently used
  uint32_t tail = kNil;  // most recently used
};

// Prioritized LRU lists of one node: one list per (tier, priority), and the node's
// windowed pools (place -> window; a place not listed is full attention).
struct NodeLists {
  std::array<std::array<ListHead, kMaxPriority + 1>, kTierCount> lists;
  std::array<size_t, kTierCount> held{};
  std::vector<std::pair<uint32_t, PoolWindow>> windows;
};

inline constexpr int kNoPriority = kMaxPriority + 1;

// A retention deadline: id is the block, generation its Block::retention_seq.
using ExpiryEntry = DeadlineHeap<uint16_t>::Entry;

// Where `node`'s entry is in `scores`; scores.size() when it has none.
inline size_t ScoreOf(std::span<const NodeScore> scores, NodeId node) {
  return static_cast<size_t>(std::find_if(scores.begin(), scores.end(),
                                          [node](const NodeScore& s) { return s.node == node; }) -
                             scores.begin());
}

// The entry that a location of `node` at the prompt's block `block` adds to, growing
// `scores` and its parallel `pending` (what the block adds, 0 so far) by a new entry at
// the first block; nullopt where the node holds no prefix reaching this block.
inline std::optional<size_t> ScoreEntryAt(std::vector<NodeScore>& scores,
                                          std::vector<double>& pending, NodeId node,
                                          uint32_t block) {
  size_t s = ScoreOf(scores, node);
  if (s == scores.size()) {
    if (block != 0) return std::nullopt;  // a node must hold the prefix from its first block
    scores.push_back({node, 0, 0.0});
    pending.push_back(0.0);
  }
  if (scores[s].prefix_blocks != block) return std::nullopt;  // its prefix ended earlier
  return s;
}

// Orders scores best first, ties in the order the nodes were met (stable). There are as
// many as nodes hold the prompt's first block, usually a handful: an insertion sort needs
// no buffer, where std::stable_sort allocates one on every lookup.
inline void SortBestFirst(std::vector<NodeScore>& scores) {
  const auto better = [](const NodeScore& a, const NodeScore& b) { return a.score > b.score; };
  constexpr size_t kInsertionSortMax = 16;
  if (scores.size() > kInsertionSortMax) {
    std::stable_sort(scores.begin(), scores.end(), better);
    return;
  }
  for (size_t i = 1; i < scores.size(); ++i) {
    const NodeScore moving = scores[i];
    size_t j = i;
    for (; j > 0 && better(moving, scores[j - 1]); --j) scores[j] = scores[j - 1];
    scores[j] = moving;
  }
}

}  // namespace internal

using internal::ExpiryEntry;
using internal::kNoPriority;
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
  uint32_t Owner(uint32_t ref) const {
    return (ref & kOverflowRef) ? overflow_[ref & ~kOverflowRef].owner : ref;
  }

  // A slot's counts (index_storage.h: narrow, with the wide ones aside).
  uint32_t ChildrenHere(uint32_t ref) const {
    return internal::CountOf(Slot(ref).children_here, wide_children_, ref);
  }
  uint32_t AddChildrenHere(uint32_t ref, int32_t delta) {
    return internal::AddToCount(Slot(ref).children_here, wide_children_, ref, delta);
  }
  uint32_t WindowLeaves(uint32_t ref) const {
    return internal::CountOf(Slot(ref).window_leaves, wide_window_leaves_, ref);
  }
  uint32_t AddWindowLeaves(uint32_t ref, int32_t delta) {
    return internal::AddToCount(Slot(ref).window_leaves, wide_window_leaves_, ref, delta);
  }

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
    return nodes_[internal::PackedNode(packed)]
        ->lists[internal::PackedTier(packed)][blocks_[Owner(ref)].priority];
  }

  void LinkTail(uint32_t ref) {
    ListHead& list = ListOf(ref);
    LocationSlot& slot = Slot(ref);
    slot.lru_prev = list.tail;
    slot.lru_next = kNil;
    if (list.tail != kNil)
      Slot(list.tail).lru_next = ref;
    else
      list.head = ref;
    list.tail = ref;
  }

  void Unlink(uint32_t ref) {
    ListHead& list = ListOf(ref);
    LocationSlot& slot = Slot(ref);
    if (slot.lru_prev != kNil)
      Slot(slot.lru_prev).lru_next = slot.lru_next;
    else
      list.head = slot.lru_next;
    if (slot.lru_next != kNil)
      Slot(slot.lru_next).lru_prev = slot.lru_prev;
    else
      list.tail = slot.lru_prev;
    slot.lru_prev = slot.lru_next = kNil;
  }

  void MoveToTail(uint32_t ref) {
    Unlink(ref);
    LinkTail(ref);
  }

  // The held slots of b that pass `keep`, in place order (node, tier, pool): renewing a
  // block in several places at once takes them in a defined order (two pools of one
  // node and tier share LRU lists).
  template <typename Keep>
  std::span<const uint32_t> HeldSlotsInPlaceOrder(uint32_t b, Keep&& keep) {
    slot_order_.clear();
    ForEachSlot(b, [&](uint32_t ref) {
      if (keep(ref)) slot_order_.push_back(ref);
    });
    if (slot_order_.size() > 1) {
      std::sort(slot_order_.begin(), slot_order_.end(),
                [&](uint32_t x, uint32_t y) { return Slot(x).packed < Slot(y).packed; });
    }
    return slot_order_;
  }

  void SetPriority(uint32_t b, uint8_t priority) {
    if (blocks_[b].priority == priority) return;
    const auto slots = HeldSlotsInPlaceOrder(b, [](uint32_t) { return true; });
    for (uint32_t ref : slots) Unlink(ref);
    blocks_[b].priority = priority;
    for (uint32_t ref : slots) LinkTail(ref);
  }

  // ---- blocks --------------------------------------------------------------------
  uint32_t NewBlock(const BlockKey& key, uint32_t parent, ScopeId scope) {
    uint32_t b;
    if (free_block_ != kNil) {
      b = free_block_;
      free_block_ = blocks_[b].parent;
      // The slot's retention sequence carries on, one past its last block's: a deadline
      // that block left in the heap must not match this block's first retention.
      const uint16_t next_seq = blocks_[b].retention_seq + 1;
      blocks_[b] = Block{};
      blocks_[b].retention_seq = next_seq;
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
      table_.Erase(blocks_[b].key.Key(), b, blocks_);
      tokens_.Erase(b, TokenGroup(b));  // a block kept without tokens: nothing to do
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
    const uint32_t place = internal::PlaceOf(packed);
    uint32_t ref = FindSlot(b, place);
    const bool was_absent = ref != kNil;
    if (was_absent) {
      Slot(ref).packed = packed;  // an absent slot comes back with its children's count
    } else {
      ref = NewSlot(b, packed);
    }
    ++Lists(internal::PackedNode(packed)).held[internal::PackedTier(packed)];
    ++locations_;
    if (WindowAt(place) != nullptr) {
      // Windowed: an absent slot already counts at its parent and has children here.
      if (!was_absent) {
        CountChildHere(b, place);
        LeafChanged(ref, +1);
      }
    } else if (const uint32_t parent = blocks_[b].parent; parent != kNil) {
      uint32_t pref = FindSlot(parent, place);
      // The parent is not at this place (a child offloaded before it): an absent slot
      // keeps the count, so the parent is interior here as soon as it arrives.
      if (pref == kNil) pref = NewSlot(parent, packed | internal::kAbsentBit);
      AddChildrenHere(pref, +1);
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
    Slot(ref).window_leaves = 0;
    return ref;
  }

  // Drops the location of a held slot; the block is collected when nothing keeps it.
  void RemoveLocation(uint32_t ref) {
    const uint32_t b = Owner(ref);
    const uint32_t packed = Slot(ref).packed;
    const uint32_t place = internal::PlaceOf(packed);
    Unlink(ref);
    --nodes_[internal::PackedNode(packed)]->held[internal::PackedTier(packed)];
    --locations_;
    if (WindowAt(place) != nullptr) {
      RemoveWindowedLocation(ref);
      return;
    }
    if (const uint32_t parent = blocks_[b].parent; parent != kNil) {
      const uint32_t pref = FindSlot(parent, place);
      if (pref != kNil && ChildrenHere(pref) > 0 && AddChildrenHere(pref, -1) == 0) {
        if (internal::IsHeld(Slot(pref).packed)) {
          NoteEvictable(parent);  // a leaf here now
        } else {
          FreeSlot(pref);  // an absent slot whose last child here is gone
          CollectIfUnused(parent);
        }
      }
    }
    if (ChildrenHere(ref) > 0) {
      Slot(ref).packed = packed | internal::kAbsentBit;  // keep the count for a comeback
      return;
    }
    FreeSlot(ref);
    CollectIfUnused(b);
  }

  // Returns a slot to the free state (overflow slots to their free list).
  // REQUIRES: both its counts are 0 (nothing of them is left in the wide tables).
  void FreeSlot(uint32_t ref) {
    assert(ChildrenHere(ref) == 0 && WindowLeaves(ref) == 0);
    const uint32_t b = Owner(ref);
    if (ref & kOverflowRef) {
      // Unchain it from the block's slot list.
      uint32_t prev = b;
      while (Slot(prev).next_location != ref) prev = Slot(prev).next_location;
      Slot(prev).next_location = Slot(ref).next_location;
      FreeOverflow(ref);
    } else {
      Slot(ref).packed = kNoLocation;
    }
  }

  // Whether `e` is its block's current deadline (not replaced, the block not gone).
  bool ExpiryLive(const ExpiryEntry& e) const {
    return blocks_[e.id].live && blocks_[e.id].retention_seq == e.generation;
  }

  void SetRetention(uint32_t b, const BlockRetention& retention) {
    SetPriority(b, retention.priority);
    Block& block = blocks_[b];
    ++block.retention_seq;  // any older deadline of this block is void
    if (retention.duration.count() > 0 && retention.priority != kDefaultPriority) {
      expiry_.Push({(options_.clock->Now() + retention.duration).count(), b, block.retention_seq},
                   [this](const ExpiryEntry& e) { return ExpiryLive(e); });
    }
  }

  // ---- windowed pools (windowed_pools.cc) ------------------------------------------
  // The window of `place`; nullptr for full attention (every place while none is declared).
  const PoolWindow* WindowAt(uint32_t place) const {
    if (windowed_places_ == 0) return nullptr;
    const uint32_t node = internal::PackedNode(place);
    if (node >= nodes_.size() || !nodes_[node]) return nullptr;
    for (const auto& [p, window] : nodes_[node]->windows) {
      if (p == place) return &window;
    }
    return nullptr;
  }
  bool HasWindows(uint32_t node) const {
    return windowed_places_ != 0 && node < nodes_.size() && nodes_[node] &&
           !nodes_[node]->windows.empty();
  }
  // Eviction may take the slot now: a leaf here, or, in a windowed pool, an interior
  // block past every window that is not a sink.
  bool Evictable(uint32_t ref) const;
  // Eviction's hint: the lowest priority of a held block that may have become evictable.
  void NoteEvictable(uint32_t b) {
    newly_evictable_ = std::min<int>(newly_evictable_, blocks_[b].priority);
  }
  void CountChildHere(uint32_t b, uint32_t place);
  void UncountChildHere(uint32_t b, uint32_t place);
  void RemoveWindowedLocation(uint32_t ref);
  // A windowed slot became (+1) or stopped being (-1) a leaf here: the blocks within its
  // window above it count it. Deferred while Store runs (one walk per net change).
  void LeafChanged(uint32_t ref, int delta);
  void WalkWindow(uint32_t ref, int delta);
  void FlushLeafChanges();
  bool IsSink(uint32_t b, uint32_t sink_blocks) const;
  Status SetNodeWindows(NodeId node, std::span<const PoolWindowSpec> windows);
  class WindowedScores;

  Status Store(const StoreRequest& r);
  Status ValidateStore(const StoreRequest& r, uint32_t parent);
  LookupResult Lookup(ScopeId scope, std::span<const BlockKey> keys,
                      std::span<const uint32_t> tail_tokens) const;
  // Partial matching (partial_match.cc): the tokens of the chain's blocks, and the cached
  // child of `parent` (kNil: the scope's root) sharing the most leading tokens with `tail`.
  void KeepTokens(const StoreRequest& r, std::span<const uint32_t> blocks);
  // The BlockTokens group of block b's tokens: its parent, or its scope's first blocks.
  uint64_t TokenGroup(uint32_t b) const {
    return blocks_[b].parent == kNil ? internal::BlockTokens::RootGroup(blocks_[b].scope)
                                     : uint64_t{blocks_[b].parent};
  }
  void MatchPartial(ScopeId scope, uint32_t parent, std::span<const uint32_t> tail,
                    LookupResult& result) const;
  void Touch(NodeId node, ScopeId scope, std::span<const BlockKey> keys);
  void TouchWindowed(uint32_t place, const PoolWindow& window, std::span<const uint32_t> chain);
  std::vector<BlockKey> Evict(NodeId node, Tier tier, size_t count,
                              const Location* demote_to = nullptr,
                              const std::function<bool(const BlockKey&)>* admit = nullptr,
                              std::vector<BlockKey>* demoted = nullptr);
  size_t Remove(Location location, std::span<const BlockKey> keys);
  size_t RemoveNode(NodeId node);
  uint32_t HeldSlotOf(const BlockKey& key, uint32_t place) const;  // kNil when not held there
  size_t ChangeTier(Location from, Location to, std::span<const BlockKey> keys);
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
  std::vector<uint32_t> scratch_;     // reused by Store and Touch
  std::vector<uint32_t> found_;       // Store: each key's block from validation
  std::vector<uint32_t> slot_order_;  // HeldSlotsInPlaceOrder
  // Lookup's per-node pending weights, kept so that a lookup allocates only its answer
  // (Lookup is const; the index is single-threaded, see block_index.h).
  mutable std::vector<double> lookup_pending_;
  DeadlineHeap<uint16_t> expiry_;
  size_t live_blocks_ = 0;
  size_t locations_ = 0;
  uint64_t expirations_ = 0;
  uint64_t refused_full_ = 0;
  std::array<uint64_t, kMaxPriority + 1> evictions_by_priority_{};
  // The slots' counts of 65,535 and more (index_storage.h).
  internal::SlotCounts wide_children_;
  internal::SlotCounts wide_window_leaves_;
  // Windowed pools: how many places are declared; Store's deferred leaf changes; Evict's
  // hint (kNoPriority: nothing became evictable).
  size_t windowed_places_ = 0;
  std::vector<std::pair<uint32_t, int>> leaf_changes_;
  bool defer_leaf_changes_ = false;
  int newly_evictable_ = kNoPriority;
  internal::BlockTokens tokens_;
};

}  // namespace kvtier::coordinator
