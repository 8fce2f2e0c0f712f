// BlockIndex::Impl: the index's operations over its parts, each a concept of its own:
// BlockTable (blocks, keys and location slots), LruLists (recency per node, tier and
// priority), PoolWindows (which places are windowed), RetentionDeadlines (when
// priorities revert) and BlockTokens (tokens for partial matching). Impl keeps what ties
// them together: a location's place in the tree (leaf counts, absent slots), eviction
// order and scoring. Internal to services/coordinator/index: block_index.cc holds the
// operations, windowed_pools.cc the windows' leaf counts, partial_match.cc the tokens'.
#pragma once

#include <algorithm>
#include <functional>
#include <span>
#include <vector>

#include "services/coordinator/index/block_index.h"
#include "services/coordinator/index/block_table.h"
#include "services/coordinator/index/block_tokens.h"
#include "services/coordinator/index/lru_lists.h"
#include "services/coordinator/index/pool_windows.h"
#include "services/coordinator/index/retention_deadlines.h"

namespace kvtier::coordinator {

using internal::Block;
using internal::kNil;
using internal::kNoLocation;
using internal::LocationSlot;

namespace internal {
inline constexpr int kNoPriority = kMaxPriority + 1;
}  // namespace internal
using internal::kNoPriority;

class BlockIndex::Impl {
 public:
  explicit Impl(const BlockIndexOptions& options)
      : options_(options), blocks_(options.expected_blocks) {}

  // ---- locations -------------------------------------------------------------------
  // Adds block b's location `packed` and counts it at its place's parent (or, windowed,
  // its ancestors). Returns the slot, not yet in its LRU list: the caller links it.
  // REQUIRES: b holds nothing at the place of `packed`.
  uint32_t AddLocation(uint32_t b, uint32_t packed) {
    const uint32_t place = internal::PlaceOf(packed);
    uint32_t ref = blocks_.FindSlot(b, place);
    const bool was_absent = ref != kNil;
    if (was_absent) {
      blocks_.Slot(ref).packed = packed;  // an absent slot comes back with its children's count
    } else {
      ref = blocks_.NewSlot(b, packed);
    }
    lists_.CountHeld(packed, +1);
    ++locations_;
    if (windows_.At(place) != nullptr) {
      // Windowed: an absent slot already counts at its parent and has children here.
      if (!was_absent) {
        CountChildHere(b, place);
        LeafChanged(ref, +1);
      }
    } else if (const uint32_t parent = blocks_[b].parent; parent != kNil) {
      uint32_t pref = blocks_.FindSlot(parent, place);
      // The parent is not at this place (a child offloaded before it): an absent slot
      // keeps the count, so the parent is interior here as soon as it arrives.
      if (pref == kNil) pref = blocks_.NewSlot(parent, packed | internal::kAbsentBit);
      blocks_.AddChildrenHere(pref, +1);
    }
    return ref;
  }

  // Drops the location of a held slot; the block is collected when nothing keeps it.
  void RemoveLocation(uint32_t ref) {
    const uint32_t b = blocks_.Owner(ref);
    const uint32_t packed = blocks_.Slot(ref).packed;
    const uint32_t place = internal::PlaceOf(packed);
    lists_.Unlink(blocks_, ref);
    lists_.CountHeld(packed, -1);
    --locations_;
    if (windows_.At(place) != nullptr) {
      RemoveWindowedLocation(ref);
      return;
    }
    if (const uint32_t parent = blocks_[b].parent; parent != kNil) {
      const uint32_t pref = blocks_.FindSlot(parent, place);
      if (pref != kNil && blocks_.ChildrenHere(pref) > 0 &&
          blocks_.AddChildrenHere(pref, -1) == 0) {
        if (internal::IsHeld(blocks_.Slot(pref).packed)) {
          NoteEvictable(parent);  // a leaf here now
        } else {
          blocks_.FreeSlot(pref);  // an absent slot whose last child here is gone
          CollectIfUnused(parent);
        }
      }
    }
    if (blocks_.ChildrenHere(ref) > 0) {
      blocks_.Slot(ref).packed = packed | internal::kAbsentBit;  // keep the count for a comeback
      return;
    }
    blocks_.FreeSlot(ref);
    CollectIfUnused(b);
  }

  // Deletes b if it has neither locations nor children, then its parent likewise.
  void CollectIfUnused(uint32_t b) {
    while (b != kNil && blocks_[b].children == 0 && !blocks_.HasLocation(b)) {
      tokens_.Erase(b, TokenGroup(b));  // a block kept without tokens: nothing to do
      b = blocks_.FreeBlock(b);
    }
  }

  // ---- recency and retention ---------------------------------------------------------
  // The held slots of b that pass `keep`, in place order (node, tier, pool): renewing a
  // block in several places at once takes them in a defined order (two pools of one
  // node and tier share LRU lists).
  template <typename Keep>
  std::span<const uint32_t> HeldSlotsInPlaceOrder(uint32_t b, Keep&& keep) {
    slot_order_.clear();
    blocks_.ForEachSlot(b, [&](uint32_t ref) {
      if (keep(ref)) slot_order_.push_back(ref);
    });
    if (slot_order_.size() > 1) {
      std::sort(slot_order_.begin(), slot_order_.end(), [&](uint32_t x, uint32_t y) {
        return blocks_.Slot(x).packed < blocks_.Slot(y).packed;
      });
    }
    return slot_order_;
  }

  // Moves b's slots to the lists of `priority`, most recently used there.
  void SetPriority(uint32_t b, uint8_t priority) {
    if (blocks_[b].priority == priority) return;
    const auto slots = HeldSlotsInPlaceOrder(b, [](uint32_t) { return true; });
    for (uint32_t ref : slots) lists_.Unlink(blocks_, ref);
    blocks_[b].priority = priority;
    for (uint32_t ref : slots) lists_.LinkTail(blocks_, ref);
  }

  void SetRetention(uint32_t b, const BlockRetention& retention) {
    SetPriority(b, retention.priority);
    ++blocks_[b].retention_seq;  // any older deadline of this block is void
    if (retention.duration.count() > 0 && retention.priority != kDefaultPriority) {
      deadlines_.Schedule(blocks_, b, (options_.clock->Now() + retention.duration).count());
    }
  }

  // ---- windowed pools (windowed_pools.cc) ------------------------------------------
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

  // ---- operations (block_index.cc) ---------------------------------------------------
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
  size_t Held(NodeId node, Tier tier) const { return lists_.Held(node, static_cast<int>(tier)); }

  BlockIndexOptions options_;
  internal::BlockTable blocks_;
  internal::LruLists lists_;
  internal::PoolWindows windows_;
  internal::RetentionDeadlines deadlines_;
  internal::BlockTokens tokens_;
  size_t locations_ = 0;
  uint64_t refused_full_ = 0;
  std::array<uint64_t, kMaxPriority + 1> evictions_by_priority_{};
  std::vector<uint32_t> scratch_;     // reused by Store and Touch
  std::vector<uint32_t> found_;       // Store: each key's block from validation
  std::vector<uint32_t> slot_order_;  // HeldSlotsInPlaceOrder
  // Lookup's per-node pending weights, kept so that a lookup allocates only its answer
  // (Lookup is const; the index is single-threaded, see block_index.h).
  mutable std::vector<double> lookup_pending_;
  // Windowed pools: Store's deferred leaf changes; Evict's hint (kNoPriority: nothing
  // became evictable).
  std::vector<std::pair<uint32_t, int>> leaf_changes_;
  bool defer_leaf_changes_ = false;
  int newly_evictable_ = kNoPriority;
};

}  // namespace kvtier::coordinator
