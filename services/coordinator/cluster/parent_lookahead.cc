#include "services/coordinator/cluster/parent_lookahead.h"

#include <algorithm>

namespace kvtier::coordinator {
namespace {

// Whether an event may not be passed by a waiting event of `keys`: it clears the node or
// touches one of those blocks.
bool Bars(const KvEvent& event, std::span<const BlockKey> keys) {
  return event.kind == KvEvent::Kind::kCleared ||
         std::ranges::any_of(event.keys, [&](const BlockKey& k) { return std::ranges::find(keys, k) != keys.end(); });
}

}  // namespace

bool TouchedBetween(std::span<const KvEvent> events, size_t at, size_t from, size_t to) {
  for (size_t k = from + 1; k <= to && k < events.size(); ++k) {
    if (Bars(events[k], events[at].keys)) return true;
  }
  return false;
}

std::optional<size_t> LaterParentStore(std::span<const KvEvent> events, size_t at, size_t after, size_t window) {
  const KvEvent& child = events[at];
  const BlockKey& parent = *child.parent;
  const size_t end = std::min(events.size(), after + 1 + window);
  for (size_t k = after + 1; k < end; ++k) {
    const KvEvent& e = events[k];
    if (Bars(e, child.keys)) return std::nullopt;
    if (e.kind == KvEvent::Kind::kStored && std::ranges::find(e.keys, parent) != e.keys.end()) return k;
  }
  return std::nullopt;
}

}  // namespace kvtier::coordinator
