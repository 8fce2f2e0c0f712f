// WaitingChildren: stored events held back until some node's event brings their parent.
//
// A stored event may name a parent that no node holds for a moment only:
//   - Two nodes' event streams reach the coordinator in no common order. A worker hands
//     a victim to a store and publishes its own removal of it at once; the store
//     publishes the block's arrival in its next batch, milliseconds later. Meanwhile the
//     worker's removal of the victim's parent (evicted by its next allocation, leaves
//     first) may arrive too, before the store's batch that brings the parent.
//   - A tier's own eviction drops a parent whose child it takes in next (its LRU knows
//     nothing of chains), and the parent often comes back, offloaded again, soon after.
// Left out at once, such a child was lost to every lookup (hundreds of blocks a replay:
// docs/history/benchmarks-2026-11.md#make-run-and-the-embedded-nodes-resyncs-2026-11-26-stop-40).
// So the coordinator parks it here, keyed by its parent, and applies it when a stored event of the
// parent arrives from any node; it gives up after `wait` (at the first Park or Expire after it: the
// coordinator's tick), or when it needs the room, and only then counts the block as orphaned.
//
// A parked event stays true only while its node says nothing more of its blocks in its
// place: a later event of that node that stores, removes or moves one of them there
// drops it (Supersedes, parent_lookahead.h), so that each node's events of a block in
// a place still apply in their order. Its events elsewhere leave it: a demotion tells
// the store below, then the removal above, and a copy parked below stays true.
// A node that leaves the index (snapshot, clear, lease expiry) takes its parked events
// with it.
//
// Memory: each parked event keeps a copy of the event (its keys, retention and tokens);
// at most `max_blocks` blocks are parked, the oldest given up first.
//
// Thread safety: none; the coordinator's thread owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "services/coordinator/cluster/coordinator.h"

namespace kvtier::coordinator {

struct WaitingChildrenOptions {
  Nanos wait = std::chrono::seconds(2);  // how long an event waits for its parent; 0: none does
  size_t max_blocks = 16384;             // over every parked event's keys
};

// A parked event and the node that sent it.
struct ParkedEvent {
  NodeId node = 0;
  KvEvent event;
};

class WaitingChildren {
 public:
  // REQUIRES: options.max_blocks > 0.
  explicit WaitingChildren(WaitingChildrenOptions options) : options_(options) {}

  // Parks `event` (a stored event with a parent) until `now + wait`.
  // REQUIRES: no key of `event` twice (ValidateStoredBlocks refuses such an event). Returns the
  // blocks given up to make room for it: the oldest parked events first, or the event itself when
  // it alone is larger than max_blocks or nothing waits (a wait of 0).
  [[nodiscard]] uint64_t Park(NodeId node, KvEvent event, Nanos now);
  // The events waiting for `parent`, oldest first; they are no longer parked.
  [[nodiscard]] std::vector<ParkedEvent> TakeChildren(const BlockKey& parent);
  // `node` has sent `later`: its parked events that `later` supersedes are dropped.
  // Returns the blocks dropped that stay held where the index does not know them
  // (LeavesBlocksUnindexed): orphans. Those removed or stored again are no loss.
  [[nodiscard]] uint64_t Touch(NodeId node, const KvEvent& later);
  // Drops every event `node` parked (its holdings are being replaced or dropped).
  void DropNode(NodeId node);
  // Gives up the events whose wait has passed by `now`. Returns their blocks.
  [[nodiscard]] uint64_t Expire(Nanos now);

  size_t blocks() const { return blocks_; }
  bool empty() const { return entries_.empty(); }

 private:
  struct Entry {
    ParkedEvent parked;
    Nanos deadline;
  };
  // Takes the entry out, and its references out of both key maps.
  Entry Take(uint64_t id);
  // Take, for an entry given up or dropped; returns its blocks.
  uint64_t Remove(uint64_t id);
  static void Unlink(std::unordered_map<BlockKey, std::vector<uint64_t>, BlockKeyHash>& map,
                     const BlockKey& key, uint64_t id);

  WaitingChildrenOptions options_;
  std::unordered_map<uint64_t, Entry> entries_;
  std::deque<uint64_t> order_;  // ids in the order parked; ids already taken are skipped
  std::unordered_map<BlockKey, std::vector<uint64_t>, BlockKeyHash> by_parent_;
  std::unordered_map<BlockKey, std::vector<uint64_t>, BlockKeyHash> by_key_;
  uint64_t next_id_ = 0;
  size_t blocks_ = 0;
};

}  // namespace kvtier::coordinator
