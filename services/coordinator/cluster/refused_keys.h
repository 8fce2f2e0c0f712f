// RefusedKeys: the blocks a full index left out of the nodes' stored events.
//
// When the index is at BlockIndexOptions::max_blocks it refuses a stored chain. The node
// holds those blocks all the same and goes on storing their children, whose events name a
// parent the index never saw. Read alone, that is a lost event and asks the node for a
// snapshot, which cannot make room: a full index would resync every node that keeps
// storing. The coordinator remembers what it left out for which node, so a child of a
// left-out block is left out too, and the stream goes on.
//
// Bounded over all nodes together (the index is full exactly when memory is short): past
// `max_keys` the oldest are forgotten. A child of a forgotten block is then read as a
// lost event, as it was before this existed; never worse.
//
// Thread safety: none; the coordinator's thread owns it.
#pragma once

#include <cstddef>
#include <deque>
#include <span>
#include <unordered_set>

#include "common/block_key.h"
#include "services/coordinator/index/block_index.h"

namespace kvtier::coordinator {

class RefusedKeys {
 public:
  // REQUIRES: max_keys > 0.
  explicit RefusedKeys(size_t max_keys) : max_keys_(max_keys) {}

  // `keys` were left out of the index for `node`.
  void Add(NodeId node, std::span<const BlockKey> keys);
  bool Contains(NodeId node, const BlockKey& key) const { return keys_.contains({node, key}); }
  // The node's holdings are gone or about to be replaced (a snapshot, a restart, a lost
  // lease): what was left out for it no longer says anything. Linear in size(); it runs
  // when a node resyncs or leaves, not per event.
  void Forget(NodeId node);
  // Keys remembered, over all nodes.
  size_t size() const { return keys_.size(); }

 private:
  struct NodeKey {
    NodeId node;
    BlockKey key;
    bool operator==(const NodeKey&) const = default;
  };
  struct NodeKeyHash {
    size_t operator()(const NodeKey& k) const { return BlockKeyHash{}(k.key) ^ k.node; }
  };

  size_t max_keys_;
  std::unordered_set<NodeKey, NodeKeyHash> keys_;
  std::deque<NodeKey> oldest_first_;  // the same entries as keys_
};

}  // namespace kvtier::coordinator
