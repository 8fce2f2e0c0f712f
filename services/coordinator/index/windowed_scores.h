// BlockIndex::Impl::WindowedScores: Lookup's view of the windowed pools along a prompt
// (internal to services/coordinator/index). For each windowed pool met, the run of
// consecutive blocks it holds, whether it holds the chain's sinks, and so the longest
// prefix it can serve: m blocks when it holds blocks [0, S) and [m - W, m).
#pragma once

#include <algorithm>
#include <vector>

#include "services/coordinator/index/block_index_impl.h"
#include "services/coordinator/index/node_scores.h"

namespace kvtier::coordinator {

class BlockIndex::Impl::WindowedScores {
 public:
  explicit WindowedScores(const Impl& index) : index_(index) {}

  // Block i of the prompt is held at `place`. Returns false (and records nothing) when
  // the place is full attention: the caller scores it. REQUIRES: i never decreases.
  bool Held(uint32_t place, uint32_t i) {
    const PoolWindow* window = index_.windows_.At(place);
    if (window == nullptr) return false;
    auto pool =
        std::find_if(pools_.begin(), pools_.end(), [&](const Pool& p) { return p.place == place; });
    if (pool == pools_.end()) pool = pools_.insert(pools_.end(), Pool{place});
    if (i != pool->next) {  // blocks [next, i) are not held here
      if (pool->next < window->sink_blocks) pool->sinks_lost = true;
      pool->run = 0;
    }
    ++pool->run;
    pool->next = i + 1;
    if (!pool->sinks_lost && pool->run >= std::min(window->window_blocks, i + 1))
      pool->served = i + 1;
    return true;
  }

  // The longest prefix the pool at `place` serves (0: none, or never seen).
  uint32_t Served(uint32_t place) const {
    auto pool =
        std::find_if(pools_.begin(), pools_.end(), [&](const Pool& p) { return p.place == place; });
    return pool == pools_.end() ? 0 : pool->served;
  }

  // Gives each node the better of its full-attention score (already in `scores`) and
  // its windowed pools' (prefix times the tier's weight). A node's windowed pools of one
  // tier hold one model's layers, a pool per window, each sequence spanning them all: the
  // node serves what every one of them serves. Returns the longest prefix a windowed pool
  // serves.
  uint32_t MergeInto(std::vector<NodeScore>& scores) const {
    uint32_t longest = 0;
    for (const Pool& pool : pools_) {
      if (pool.served == 0) continue;
      longest = std::max(longest, pool.served);
      const uint32_t node = internal::PackedNode(pool.place);
      const auto tier = internal::PackedTier(pool.place);
      uint32_t served = pool.served;
      for (const auto& [place, window] : index_.windows_.Of(node)) {
        if (internal::PackedTier(place) == tier) served = std::min(served, Served(place));
      }
      if (served == 0) continue;
      const NodeScore candidate{static_cast<NodeId>(node), served,
                                served * index_.options_.tier_weights[tier]};
      const size_t s = internal::ScoreOf(scores, candidate.node);
      if (s == scores.size()) {
        scores.push_back(candidate);
      } else if (candidate.score > scores[s].score ||
                 (candidate.score == scores[s].score &&
                  candidate.prefix_blocks > scores[s].prefix_blocks)) {
        scores[s] = candidate;
      }
    }
    return longest;
  }

 private:
  struct Pool {
    uint32_t place = 0;
    uint32_t next = 0;        // one past the last block held here
    uint32_t run = 0;         // consecutive blocks held here, ending at next - 1
    bool sinks_lost = false;  // a sink block is not held here
    uint32_t served = 0;      // the longest prefix this pool serves so far
  };

  const Impl& index_;
  std::vector<Pool> pools_;
};

}  // namespace kvtier::coordinator
