#include "services/coordinator/cluster/parent_lookahead.h"

#include <algorithm>

namespace kvtier::coordinator {

bool Supersedes(const KvEvent& later, const KvEvent& stored) {
  if (later.kind == KvEvent::Kind::kCleared) return true;
  const bool same_place = (later.tier == stored.tier && later.pool == stored.pool) ||
                          (later.kind == KvEvent::Kind::kTierChanged &&
                           later.to_tier == stored.tier && later.to_pool == stored.pool);
  return same_place && std::ranges::any_of(later.keys, [&](const BlockKey& k) {
           return std::ranges::find(stored.keys, k) != stored.keys.end();
         });
}

bool LeavesBlocksUnindexed(const KvEvent& later, const KvEvent& stored) {
  return later.kind == KvEvent::Kind::kTierChanged && later.tier == stored.tier &&
         later.pool == stored.pool;
}

std::optional<size_t> SupersededAt(std::span<const KvEvent> events, size_t at, size_t from,
                                   size_t to) {
  for (size_t k = from + 1; k <= to && k < events.size(); ++k) {
    if (Supersedes(events[k], events[at])) return k;
  }
  return std::nullopt;
}

std::optional<size_t> LaterParentStore(std::span<const KvEvent> events, size_t at, size_t after,
                                       size_t window) {
  const KvEvent& child = events[at];
  const BlockKey& parent = *child.parent;
  const size_t end = std::min(events.size(), after + 1 + window);
  for (size_t k = after + 1; k < end; ++k) {
    const KvEvent& e = events[k];
    if (Supersedes(e, child)) return std::nullopt;
    if (e.kind == KvEvent::Kind::kStored && std::ranges::find(e.keys, parent) != e.keys.end())
      return k;
  }
  return std::nullopt;
}

}  // namespace kvtier::coordinator
