// LruLists: the index's prioritized LRU lists (internal to services/coordinator/index).
// Per node, one list per (tier, priority) of the slots held there, least recently used
// first, linked through the slots themselves (LocationSlot::lru_prev, lru_next), and how
// many slots each tier holds. Two pools of a node and tier share its lists. A slot is in
// the list of its block's priority: SetPriority in the index unlinks and relinks it.
//
// Thread safety: none (owned by one BlockIndex).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "services/coordinator/index/block_table.h"

namespace kvtier::coordinator::internal {

struct ListHead {
  uint32_t head = kNil;  // least recently used
  uint32_t tail = kNil;  // most recently used
};

class LruLists {
 public:
  // The list of tier `tier` and priority `priority` of `node`; REQUIRES: Has(node).
  ListHead& List(uint32_t node, int tier, int priority) {
    return nodes_[node]->lists[tier][priority];
  }
  bool Has(uint32_t node) const { return node < nodes_.size() && nodes_[node] != nullptr; }
  size_t Held(uint32_t node, int tier) const { return Has(node) ? nodes_[node]->held[tier] : 0; }
  // Whether the node holds no slot in any tier.
  bool Empty(uint32_t node) const {
    if (!Has(node)) return true;
    for (size_t held : nodes_[node]->held) {
      if (held != 0) return false;
    }
    return true;
  }

  // Counts a slot holding `packed` in (+1) or out of (-1) its node and tier, making the
  // node's lists on first use (before any of its slots is linked).
  void CountHeld(uint32_t packed, int delta) {
    const uint32_t node = PackedNode(packed);
    if (node >= nodes_.size()) nodes_.resize(node + 1);
    if (!nodes_[node]) nodes_[node] = std::make_unique<NodeLists>();
    nodes_[node]->held[PackedTier(packed)] += static_cast<size_t>(delta);
  }

  // REQUIRES (all three): the slot's node has lists (CountHeld made them).
  void LinkTail(BlockTable& blocks, uint32_t ref) {
    ListHead& list = ListOf(blocks, ref);
    LocationSlot& slot = blocks.Slot(ref);
    slot.lru_prev = list.tail;
    slot.lru_next = kNil;
    if (list.tail != kNil)
      blocks.Slot(list.tail).lru_next = ref;
    else
      list.head = ref;
    list.tail = ref;
  }
  void Unlink(BlockTable& blocks, uint32_t ref) {
    ListHead& list = ListOf(blocks, ref);
    LocationSlot& slot = blocks.Slot(ref);
    if (slot.lru_prev != kNil)
      blocks.Slot(slot.lru_prev).lru_next = slot.lru_next;
    else
      list.head = slot.lru_next;
    if (slot.lru_next != kNil)
      blocks.Slot(slot.lru_next).lru_prev = slot.lru_prev;
    else
      list.tail = slot.lru_prev;
    slot.lru_prev = slot.lru_next = kNil;
  }
  void MoveToTail(BlockTable& blocks, uint32_t ref) {
    Unlink(blocks, ref);
    LinkTail(blocks, ref);
  }

  size_t memory_bytes() const {
    size_t bytes = nodes_.size() * sizeof(void*);
    for (const auto& lists : nodes_) bytes += lists ? sizeof(NodeLists) : 0;
    return bytes;
  }

 private:
  struct NodeLists {
    std::array<std::array<ListHead, kMaxPriority + 1>, kTierCount> lists;
    std::array<size_t, kTierCount> held{};
  };

  ListHead& ListOf(BlockTable& blocks, uint32_t ref) {
    const uint32_t packed = blocks.Slot(ref).packed & ~kAbsentBit;
    return nodes_[PackedNode(packed)]
        ->lists[PackedTier(packed)][blocks[blocks.Owner(ref)].priority];
  }

  std::vector<std::unique_ptr<NodeLists>> nodes_;
};

}  // namespace kvtier::coordinator::internal
