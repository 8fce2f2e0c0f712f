// RetentionDeadlines: when each block's retention ends and its priority reverts to the
// default (internal to services/coordinator/index). A deadline names its block and the
// block's retention sequence when it was set (Block::retention_seq): a later retention of
// the block, or its deletion, moves the sequence on and so voids the deadline, which is
// dropped when it comes due (common/deadline_heap.h).
//
// Thread safety: none (owned by one BlockIndex).
#pragma once

#include <cstdint>

#include "common/deadline_heap.h"
#include "services/coordinator/index/block_table.h"

namespace kvtier::coordinator::internal {

class RetentionDeadlines {
 public:
  using Entry = DeadlineHeap<uint16_t>::Entry;

  // Block b's retention ends at `deadline_ns`. REQUIRES: b's retention_seq is the one
  // this retention was set under.
  void Schedule(const BlockTable& blocks, uint32_t b, int64_t deadline_ns) {
    heap_.Push({deadline_ns, b, blocks[b].retention_seq},
               [&blocks](const Entry& e) { return Live(blocks, e); });
  }

  // Calls revert(b) for every block whose retention has ended by `now_ns`, earliest first.
  template <typename Revert>
  void PopDue(const BlockTable& blocks, int64_t now_ns, Revert&& revert) {
    heap_.PopDue(
        now_ns, [&blocks](const Entry& e) { return Live(blocks, e); },
        [&](const Entry& e) {
          ++expirations_;
          revert(e.id);
        });
  }

  uint64_t expirations() const { return expirations_; }
  size_t memory_bytes() const { return heap_.size() * sizeof(Entry); }

 private:
  // Whether `e` is its block's current deadline (not replaced, the block not gone).
  static bool Live(const BlockTable& blocks, const Entry& e) {
    return blocks[e.id].live && blocks[e.id].retention_seq == e.generation;
  }

  DeadlineHeap<uint16_t> heap_;
  uint64_t expirations_ = 0;
};

}  // namespace kvtier::coordinator::internal
