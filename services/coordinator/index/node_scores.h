// Lookup's per-node scores (internal to services/coordinator/index): the entry of a node
// in a LookupResult's scores, grown block by block along the prompt, and their order.
//
// Thread safety: pure functions over the caller's vectors.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "services/coordinator/index/block_index.h"

namespace kvtier::coordinator::internal {

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

}  // namespace kvtier::coordinator::internal
