#include "services/coordinator/index/block_tokens.h"

#include <algorithm>

namespace kvtier::coordinator::internal {
namespace {

// What one entry costs: the hash node of each map (value, link, cached hash) and a slot
// in the group's child list. An estimate of the allocator's share, not a measurement.
constexpr size_t kEntryOverhead = sizeof(std::pair<const uint32_t, uint64_t>) + sizeof(std::vector<uint32_t>) +
                                  3 * sizeof(void*) + sizeof(uint32_t);
constexpr size_t kGroupOverhead = sizeof(std::pair<const uint64_t, std::vector<uint32_t>>) + 3 * sizeof(void*);

}  // namespace

void BlockTokens::Set(uint32_t block, uint64_t group, std::span<const uint32_t> tokens) {
  Entry& entry = tokens_[block];
  entry.group = group;
  entry.tokens.assign(tokens.begin(), tokens.end());
  auto [it, new_group] = children_.try_emplace(group);
  it->second.push_back(block);
  memory_bytes_ += kEntryOverhead + tokens.size() * sizeof(uint32_t) + (new_group ? kGroupOverhead : 0);
}

void BlockTokens::Erase(uint32_t block) {
  const auto it = tokens_.find(block);
  if (it == tokens_.end()) return;
  const auto group = children_.find(it->second.group);
  std::vector<uint32_t>& siblings = group->second;
  // Order among siblings does not matter: swap with the last.
  *std::find(siblings.begin(), siblings.end(), block) = siblings.back();
  siblings.pop_back();
  memory_bytes_ -= kEntryOverhead + it->second.tokens.size() * sizeof(uint32_t);
  if (siblings.empty()) {
    children_.erase(group);
    memory_bytes_ -= kGroupOverhead;
  }
  tokens_.erase(it);
}

}  // namespace kvtier::coordinator::internal
