// PoolWindows: which places of the index are windowed pools, and their windows (internal
// to services/coordinator/index). A place not declared is full attention; while no node
// declares one, every lookup answers nullptr at once (the common, full-attention index).
//
// Thread safety: none (owned by one BlockIndex).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "services/coordinator/index/block_index.h"
#include "services/coordinator/index/index_storage.h"

namespace kvtier::coordinator::internal {

class PoolWindows {
 public:
  using Declared = std::vector<std::pair<uint32_t, PoolWindow>>;  // place -> window, by place

  // The window of `place`; nullptr for full attention.
  const PoolWindow* At(uint32_t place) const {
    if (places_ == 0) return nullptr;
    const uint32_t node = PackedNode(place);
    if (node >= by_node_.size()) return nullptr;
    for (const auto& [p, window] : by_node_[node]) {
      if (p == place) return &window;
    }
    return nullptr;
  }
  // Whether `node` has a windowed pool.
  bool Any(uint32_t node) const {
    return places_ != 0 && node < by_node_.size() && !by_node_[node].empty();
  }
  bool any() const { return places_ != 0; }
  std::span<const std::pair<uint32_t, PoolWindow>> Of(uint32_t node) const {
    if (node >= by_node_.size()) return {};
    return by_node_[node];
  }

  // Replaces the node's windowed places. REQUIRES: `declared` is sorted by place, each
  // place of `node` once, none full attention.
  void Set(uint32_t node, Declared declared) {
    if (node >= by_node_.size()) by_node_.resize(node + 1);
    places_ = places_ - by_node_[node].size() + declared.size();
    by_node_[node] = std::move(declared);
  }

  size_t memory_bytes() const {
    size_t bytes = by_node_.capacity() * sizeof(Declared);
    for (const Declared& d : by_node_) bytes += d.capacity() * sizeof(Declared::value_type);
    return bytes;
  }

 private:
  std::vector<Declared> by_node_;
  size_t places_ = 0;  // windowed places of all nodes
};

}  // namespace kvtier::coordinator::internal
