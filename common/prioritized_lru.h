// PrioritizedLru: the eviction order kvtier uses everywhere blocks compete for room
// (worker pools, the host tier, the disk tier).
//
// Every block of the lowest priority goes before any block of the next; within a priority
// the least recently released goes first. One intrusive doubly linked list per priority
// over dense block ids (no allocation after construction) and a 128-bit mask of the
// non-empty lists, so finding the first candidate is two bit scans.
//
// Thread safety: none (owned by one pool or tier, under its lock).
// REQUIRES: ids below capacity() (Grow raises it); priorities in [0, 100]; an id is pushed
// only when it is not linked and removed only when it is.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvtier {

class PrioritizedLru {
 public:
  static constexpr uint32_t kNil = UINT32_MAX;
  static constexpr int kPriorities = 101;

  explicit PrioritizedLru(uint32_t capacity) : nodes_(capacity) {}

  bool Contains(uint32_t id) const { return nodes_[id].linked; }
  size_t size() const { return size_; }
  uint32_t capacity() const { return static_cast<uint32_t>(nodes_.size()); }
  uint8_t priority(uint32_t id) const { return nodes_[id].priority; }

  // Raises the capacity (tiers whose entry count is not known up front); ids keep their
  // places. Never shrinks.
  void Grow(uint32_t capacity) {
    if (capacity > nodes_.size()) nodes_.resize(capacity);
  }

  void PushMostRecent(uint32_t id, uint8_t priority) {
    Node& node = nodes_[id];
    List& list = lists_[priority];
    node = Node{list.tail, kNil, priority, true};
    if (list.tail != kNil)
      nodes_[list.tail].next = id;
    else
      list.head = id;
    list.tail = id;
    nonempty_[priority / 64] |= uint64_t{1} << (priority % 64);
    ++size_;
  }

  // First in eviction order within its priority: where an entry goes back whose
  // eviction was undone (push several in the reverse order of their eviction).
  void PushLeastRecent(uint32_t id, uint8_t priority) {
    Node& node = nodes_[id];
    List& list = lists_[priority];
    node = Node{kNil, list.head, priority, true};
    if (list.head != kNil)
      nodes_[list.head].prev = id;
    else
      list.tail = id;
    list.head = id;
    nonempty_[priority / 64] |= uint64_t{1} << (priority % 64);
    ++size_;
  }

  void Remove(uint32_t id) {
    Node& node = nodes_[id];
    List& list = lists_[node.priority];
    if (node.prev != kNil)
      nodes_[node.prev].next = node.next;
    else
      list.head = node.next;
    if (node.next != kNil)
      nodes_[node.next].prev = node.prev;
    else
      list.tail = node.prev;
    if (list.head == kNil) nonempty_[node.priority / 64] &= ~(uint64_t{1} << (node.priority % 64));
    node.linked = false;
    --size_;
  }

  // The first id in eviction order that `eligible` accepts; kNil when none does.
  template <typename Eligible>
  uint32_t FindVictim(Eligible&& eligible) const {
    for (int word = 0; word < 2; ++word) {
      for (uint64_t bits = nonempty_[word]; bits != 0; bits &= bits - 1) {
        const int priority = word * 64 + std::countr_zero(bits);
        for (uint32_t id = lists_[priority].head; id != kNil; id = nodes_[id].next) {
          if (eligible(id)) return id;
        }
      }
    }
    return kNil;
  }

 private:
  struct Node {
    uint32_t prev = kNil;
    uint32_t next = kNil;
    uint8_t priority = 0;
    bool linked = false;
  };
  struct List {
    uint32_t head = kNil;
    uint32_t tail = kNil;
  };

  std::vector<Node> nodes_;
  std::array<List, kPriorities> lists_{};
  std::array<uint64_t, 2> nonempty_{};
  size_t size_ = 0;
};

}  // namespace kvtier
