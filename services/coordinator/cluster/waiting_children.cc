#include "services/coordinator/cluster/waiting_children.h"

#include <algorithm>
#include <utility>

#include "services/coordinator/cluster/parent_lookahead.h"

namespace kvtier::coordinator {

uint64_t WaitingChildren::Park(NodeId node, KvEvent event, Nanos now) {
  const size_t size = event.keys.size();
  if (options_.wait.count() == 0 || size > options_.max_blocks || !event.parent.has_value())
    return size;
  uint64_t given_up = Expire(now);
  while (blocks_ + size > options_.max_blocks) {
    const uint64_t oldest = order_.front();
    order_.pop_front();
    if (entries_.contains(oldest)) given_up += Remove(oldest);
  }
  const uint64_t id = next_id_++;
  by_parent_[*event.parent].push_back(id);
  for (const BlockKey& key : event.keys) by_key_[key].push_back(id);
  blocks_ += size;
  entries_.emplace(id, Entry{{node, std::move(event)}, now + options_.wait});
  order_.push_back(id);
  return given_up;
}

std::vector<ParkedEvent> WaitingChildren::TakeChildren(const BlockKey& parent) {
  std::vector<ParkedEvent> children;
  const auto it = by_parent_.find(parent);
  if (it == by_parent_.end()) return children;
  const std::vector<uint64_t> ids = it->second;  // in the order parked; Remove edits the map
  for (uint64_t id : ids) children.push_back(Take(id).parked);
  return children;
}

uint64_t WaitingChildren::Touch(NodeId node, const KvEvent& later) {
  uint64_t dropped = 0;
  for (const BlockKey& key : later.keys) {
    const auto it = by_key_.find(key);
    if (it == by_key_.end()) continue;
    std::vector<uint64_t> ids = it->second;
    for (uint64_t id : ids) {
      const ParkedEvent& parked = entries_.at(id).parked;
      if (parked.node != node || !Supersedes(later, parked.event)) continue;
      const bool lost = LeavesBlocksUnindexed(later, parked.event);
      const uint64_t blocks = Remove(id);
      if (lost) dropped += blocks;
    }
  }
  return dropped;
}

void WaitingChildren::DropNode(NodeId node) {
  std::vector<uint64_t> ids;
  for (const auto& [id, entry] : entries_) {
    if (entry.parked.node == node) ids.push_back(id);
  }
  for (uint64_t id : ids) Remove(id);
}

uint64_t WaitingChildren::Expire(Nanos now) {
  uint64_t given_up = 0;
  while (!order_.empty()) {
    const uint64_t id = order_.front();
    const auto it = entries_.find(id);
    // Every wait is the same length, so deadlines rise along order_.
    if (it != entries_.end() && it->second.deadline > now) break;
    order_.pop_front();
    if (it != entries_.end()) given_up += Remove(id);
  }
  return given_up;
}

WaitingChildren::Entry WaitingChildren::Take(uint64_t id) {
  auto node = entries_.extract(id);
  Entry& entry = node.mapped();
  const KvEvent& event = entry.parked.event;
  Unlink(by_parent_, *event.parent, id);
  for (const BlockKey& key : event.keys) Unlink(by_key_, key, id);
  blocks_ -= event.keys.size();
  if (entries_.empty()) order_.clear();  // what is left there was taken already
  return std::move(entry);
}

uint64_t WaitingChildren::Remove(uint64_t id) { return Take(id).parked.event.keys.size(); }

void WaitingChildren::Unlink(std::unordered_map<BlockKey, std::vector<uint64_t>, BlockKeyHash>& map,
                             const BlockKey& key, uint64_t id) {
  const auto it = map.find(key);
  if (it == map.end()) return;
  std::erase(it->second, id);
  if (it->second.empty()) map.erase(it);
}

}  // namespace kvtier::coordinator
