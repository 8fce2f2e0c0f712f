#include "services/coordinator/cluster/event_chains.h"

#include <iterator>
#include <utility>

namespace kvtier::coordinator {
namespace {

bool SameTokensPerBlock(const KvEvent& event, const KvEvent& next) {
  // ValidateStoredBlocks holds each event to the same count for every block it names.
  const size_t per_block = event.tokens.size() / event.keys.size();
  return next.tokens.size() == per_block * next.keys.size();
}

}  // namespace

bool JoinsEvent(const KvEvent& event, const KvEvent& next) {
  if (event.kind != next.kind || event.keys.empty() || next.keys.empty() ||
      event.tier != next.tier || event.pool != next.pool) {
    return false;
  }
  switch (next.kind) {
    case KvEvent::Kind::kStored:
      // Retention is one per block, or none for any block of an event.
      return next.parent == event.keys.back() && next.scope == event.scope &&
             event.retention.empty() == next.retention.empty() && SameTokensPerBlock(event, next);
    case KvEvent::Kind::kRemoved: return true;
    case KvEvent::Kind::kTierChanged:
      return next.to_tier == event.to_tier && next.to_pool == event.to_pool;
    case KvEvent::Kind::kCleared: return false;
  }
  return false;
}

std::vector<KvEvent> JoinChains(std::vector<KvEvent> events) {
  std::vector<KvEvent> joined;
  joined.reserve(events.size());
  for (KvEvent& next : events) {
    if (!joined.empty() && JoinsEvent(joined.back(), next)) {
      KvEvent& event = joined.back();
      event.keys.insert(event.keys.end(), next.keys.begin(), next.keys.end());
      event.retention.insert(event.retention.end(), next.retention.begin(), next.retention.end());
      event.tokens.insert(event.tokens.end(), next.tokens.begin(), next.tokens.end());
    } else {
      joined.push_back(std::move(next));
    }
  }
  return joined;
}

}  // namespace kvtier::coordinator
