// Partial matching: the tokens kept for blocks stored with them, and Lookup's comparison
// of a prompt's tail with the cached children of its matched prefix (block_tokens.h says
// why keys alone cannot tell).
#include <algorithm>

#include "services/coordinator/index/block_index_impl.h"
#include "services/coordinator/index/node_scores.h"

namespace kvtier::coordinator {
namespace {

Location LocationOf(uint32_t packed) {
  return {static_cast<NodeId>(internal::PackedNode(packed)),
          static_cast<Tier>(internal::PackedTier(packed)),
          static_cast<uint16_t>(internal::PackedPool(packed))};
}

}  // namespace

// A key commits to its tokens, so a block already kept keeps what it has; a block gains
// tokens when first stored with them (it may have come from a node that sends none).
void BlockIndex::Impl::KeepTokens(const StoreRequest& r, std::span<const uint32_t> slots) {
  const size_t per_block = r.tokens.size() / r.keys.size();
  for (size_t i = 0; i < slots.size(); ++i) {
    const uint32_t b = blocks_.Owner(slots[i]);
    if (!tokens_.Has(b)) tokens_.Set(b, TokenGroup(b), r.tokens.subspan(i * per_block, per_block));
  }
}

void BlockIndex::Impl::MatchPartial(ScopeId scope, uint32_t parent, std::span<const uint32_t> tail,
                                    LookupResult& result) const {
  const uint64_t group =
      parent == kNil ? internal::BlockTokens::RootGroup(scope) : uint64_t{parent};
  const uint32_t prefix = result.matched_blocks;
  // Per score entry, the best share of a partially matching child the node holds.
  std::vector<double> bonus(result.scores.size(), 0.0);
  uint32_t best = kNil;
  tokens_.ForEachChild(group, [&](uint32_t child, std::span<const uint32_t> cached) {
    if (!blocks_.HasLocation(child)) return;  // a ghost in a windowed pool: nothing to copy from
    const size_t limit = std::min(cached.size(), tail.size());
    const auto shared = static_cast<uint32_t>(
        std::mismatch(tail.begin(), tail.begin() + static_cast<std::ptrdiff_t>(limit),
                      cached.begin())
            .first -
        tail.begin());
    if (shared == 0) return;
    if (shared > result.partial.tokens) {
      result.partial.tokens = shared;
      result.partial.block_tokens = static_cast<uint32_t>(cached.size());
      best = child;
    }
    blocks_.ForEachSlot(child, [&](uint32_t ref) {
      const uint32_t packed = blocks_.Slot(ref).packed;
      const auto node = static_cast<NodeId>(internal::PackedNode(packed));
      const std::optional<size_t> s = internal::ScoreEntryAt(result.scores, bonus, node, prefix);
      if (!s) return;  // the node does not hold the prefix before this block
      const double share =
          options_.tier_weights[internal::PackedTier(packed)] * shared / cached.size();
      if (share > bonus[*s]) {
        bonus[*s] = share;
        result.scores[*s].partial_tokens = shared;
      }
    });
  });
  for (size_t s = 0; s < result.scores.size(); ++s) result.scores[s].score += bonus[s];
  if (best != kNil) {
    result.partial.key = blocks_[best].key.Key();
    blocks_.ForEachSlot(best, [&](uint32_t ref) {
      result.partial.locations.push_back(LocationOf(blocks_.Slot(ref).packed));
    });
  }
}

}  // namespace kvtier::coordinator
