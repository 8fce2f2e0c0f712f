// Windowed pools in BlockIndex: which blocks have left every window, and the declaration
// of windows per node.
//
// In a windowed place (one pool of one tier of one node) two invariants hold:
// - Every ancestor of a block with a slot there has a slot there too (absent where the
//   pool does not hold it), and children_here counts the children with a slot (held or
//   absent). So children_here == 0 on a held slot means no block below it is held there:
//   a leaf. (Full-attention places count only held children, one level down.)
// - the slot's window_leaves counts the leaves held there 1 to W - 1 blocks below it:
//   the cached sequences whose window still covers it. An interior slot with no count
//   that is not a sink has left every window and may be evicted.
// A leaf appearing or going walks W - 1 ancestors; Store defers its walks to the end, so
// a chain of n blocks costs two walks, not 2n.
#include <algorithm>
#include <cassert>

#include "services/coordinator/index/block_index_impl.h"

namespace kvtier::coordinator {

bool BlockIndex::Impl::Evictable(uint32_t ref) const {
  const LocationSlot& slot = blocks_.Slot(ref);
  if (blocks_.ChildrenHere(ref) == 0) return true;
  const PoolWindow* window = windows_.At(internal::PlaceOf(slot.packed));
  return window != nullptr && blocks_.WindowLeaves(ref) == 0 &&
         !IsSink(blocks_.Owner(ref), window->sink_blocks);
}

bool BlockIndex::Impl::IsSink(uint32_t b, uint32_t sink_blocks) const {
  for (uint32_t k = 0; k < sink_blocks; ++k) {  // block b is a sink when its depth < sink_blocks
    if (blocks_[b].parent == kNil) return true;
    b = blocks_[b].parent;
  }
  return false;
}

void BlockIndex::Impl::CountChildHere(uint32_t b, uint32_t place) {
  for (uint32_t parent = blocks_[b].parent; parent != kNil; parent = blocks_[parent].parent) {
    uint32_t pref = blocks_.FindSlot(parent, place);
    if (pref != kNil) {
      if (blocks_.AddChildrenHere(pref, +1) == 1 && internal::IsHeld(blocks_.Slot(pref).packed))
        LeafChanged(pref, -1);
      return;  // its ancestors have slots already
    }
    pref = blocks_.NewSlot(parent, place | internal::kAbsentBit);
    blocks_.AddChildrenHere(pref, +1);  // and its own parent counts it, next round
  }
}

void BlockIndex::Impl::UncountChildHere(uint32_t b, uint32_t place) {
  for (uint32_t parent = blocks_[b].parent; parent != kNil; parent = blocks_[parent].parent) {
    const uint32_t pref = blocks_.FindSlot(parent, place);
    assert(pref != kNil && "a windowed slot's ancestors have slots");
    if (blocks_.AddChildrenHere(pref, -1) > 0) return;
    if (internal::IsHeld(blocks_.Slot(pref).packed)) {
      LeafChanged(pref, +1);
      NoteEvictable(parent);
      return;
    }
    blocks_.FreeSlot(pref);  // an absent slot with nothing held below any more
  }
}

void BlockIndex::Impl::RemoveWindowedLocation(uint32_t ref) {
  LocationSlot& slot = blocks_.Slot(ref);
  if (blocks_.ChildrenHere(ref) > 0) {
    // Interior (past every window, when Evict chose it): the slot stays as the skeleton
    // that links the blocks below to the root, with its counts.
    slot.packed |= internal::kAbsentBit;
    return;
  }
  const uint32_t b = blocks_.Owner(ref);
  const uint32_t place = internal::PlaceOf(slot.packed);
  LeafChanged(ref, -1);
  blocks_.FreeSlot(ref);
  UncountChildHere(b, place);
  CollectIfUnused(b);
}

void BlockIndex::Impl::LeafChanged(uint32_t ref, int delta) {
  if (windows_.At(internal::PlaceOf(blocks_.Slot(ref).packed))->window_blocks <= 1)
    return;  // a window of one block
  if (!defer_leaf_changes_) {
    WalkWindow(ref, delta);
  } else if (!leaf_changes_.empty() && leaf_changes_.back().first == ref) {
    leaf_changes_.back().second += delta;  // a chain's block: a leaf, then its child's parent
  } else {
    leaf_changes_.emplace_back(ref, delta);
  }
}

void BlockIndex::Impl::WalkWindow(uint32_t ref, int delta) {
  const uint32_t place = internal::PlaceOf(blocks_.Slot(ref).packed);
  const uint32_t window_blocks = windows_.At(place)->window_blocks;
  uint32_t b = blocks_.Owner(ref);
  for (uint32_t distance = 1; distance < window_blocks; ++distance) {
    b = blocks_[b].parent;
    if (b == kNil) return;
    const uint32_t a = blocks_.FindSlot(b, place);
    assert(a != kNil && "a windowed slot's ancestors have slots");
    assert(static_cast<int64_t>(blocks_.WindowLeaves(a)) + delta >= 0);
    if (blocks_.AddWindowLeaves(a, delta) != 0 || delta > 0) continue;
    if (internal::IsHeld(blocks_.Slot(a).packed))
      NoteEvictable(b);  // it may have left every window
  }
}

void BlockIndex::Impl::FlushLeafChanges() {
  defer_leaf_changes_ = false;
  for (const auto& [ref, delta] : leaf_changes_) {
    if (delta != 0) WalkWindow(ref, delta);
  }
  leaf_changes_.clear();
}

Status ValidatePoolWindows(std::span<const PoolWindowSpec> pools) {
  for (size_t i = 0; i < pools.size(); ++i) {
    const Location& p = pools[i].pool;
    const PoolWindow& w = pools[i].window;
    const std::string name = "pool " + std::to_string(p.pool) + " of tier " +
                             std::to_string(static_cast<int>(p.tier)) + " (entry " +
                             std::to_string(i) + ")";
    if (static_cast<int>(p.tier) >= kTierCount)
      return InvalidArgumentError(name + ": unknown tier");
    if (w.sink_blocks > w.window_blocks) {
      return InvalidArgumentError(
          name + ": " + std::to_string(w.sink_blocks) + " sink blocks need a window of " +
          "at least as many blocks, not " + std::to_string(w.window_blocks));
    }
    for (size_t j = 0; j < i; ++j) {
      if (pools[j].pool.tier == p.tier && pools[j].pool.pool == p.pool)
        return InvalidArgumentError(name + " is listed twice");
    }
  }
  return Status::Ok();
}

Status BlockIndex::Impl::SetNodeWindows(NodeId node, std::span<const PoolWindowSpec> windows) {
  if (node >= kMaxNodes) {
    return InvalidArgumentError("node id " + std::to_string(node) + " is out of range [0, " +
                                std::to_string(kMaxNodes - 1) + "]");
  }
  for (const PoolWindowSpec& spec : windows) {
    if (spec.pool.node != node) {
      return InvalidArgumentError("pool " + std::to_string(spec.pool.pool) + " belongs to node " +
                                  std::to_string(spec.pool.node) + ", not " + std::to_string(node));
    }
  }
  KVTIER_RETURN_IF_ERROR(ValidatePoolWindows(windows));
  std::vector<std::pair<uint32_t, PoolWindow>> declared;
  for (const PoolWindowSpec& spec : windows) {
    if (spec.window.window_blocks == 0) continue;  // full attention: the default
    declared.emplace_back(
        internal::PackLocation(node, static_cast<uint32_t>(spec.pool.tier), spec.pool.pool),
        spec.window);
  }
  std::sort(declared.begin(), declared.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  const auto current = windows_.Of(node);
  if (std::equal(current.begin(), current.end(), declared.begin(), declared.end())) {
    return Status::Ok();
  }
  if (!lists_.Empty(node)) {
    return FailedPreconditionError("node " + std::to_string(node) +
                                   " holds blocks: its pools' windows cannot change under them");
  }
  windows_.Set(node, std::move(declared));
  return Status::Ok();
}

}  // namespace kvtier::coordinator
