#include "services/coordinator/cluster/refused_keys.h"

#include <algorithm>

namespace kvtier::coordinator {

void RefusedKeys::Add(NodeId node, std::span<const BlockKey> keys) {
  for (const BlockKey& key : keys) {
    if (!keys_.insert({node, key}).second) continue;
    oldest_first_.push_back({node, key});
    if (oldest_first_.size() > max_keys_) {
      keys_.erase(oldest_first_.front());
      oldest_first_.pop_front();
    }
  }
}

void RefusedKeys::Forget(NodeId node) {
  const auto of_node = [node](const NodeKey& k) { return k.node == node; };
  if (std::none_of(oldest_first_.begin(), oldest_first_.end(), of_node)) return;
  std::erase_if(keys_, of_node);
  std::erase_if(oldest_first_, of_node);
}

}  // namespace kvtier::coordinator
