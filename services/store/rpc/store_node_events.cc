#include "services/store/rpc/store_node_events.h"

namespace kvtier::store {
namespace {

kvtier::Tier ToTier(kvtier::Tier tier) {
  return tier == kvtier::Tier::kHost ? kvtier::Tier::kHost : kvtier::Tier::kDisk;
}

}  // namespace

coordinator::NodeEvent ToNodeEvent(const storage::StoreEvent& e) {
  coordinator::NodeEvent out;
  out.key = e.header.key;
  out.tier = ToTier(e.tier);
  switch (e.kind) {
    case storage::StoreEvent::Kind::kStored:
      out.kind = coordinator::NodeEvent::Kind::kStored;
      out.first = e.header.first_in_chain;
      out.parent = e.header.parent;
      out.priority = e.header.priority;
      out.retention_ms = e.header.retention_left_ms;
      out.salt_scope = e.header.salt_scope;
      break;
    case storage::StoreEvent::Kind::kRemoved:
      out.kind = coordinator::NodeEvent::Kind::kRemoved;
      break;
  }
  return out;
}

std::vector<coordinator::NodePool> ToNodePools(const storage::TieredStore& store) {
  const storage::TieredStoreStats stats = store.Stats();
  std::vector<coordinator::NodePool> pools;
  if (stats.host)
    pools.push_back({.tier = kvtier::Tier::kHost, .capacity_bytes = stats.host->capacity_bytes});
  if (stats.disk)
    pools.push_back({.tier = kvtier::Tier::kDisk, .capacity_bytes = stats.disk->capacity_bytes});
  return pools;
}

std::vector<coordinator::NodeBlock> ToNodeBlocks(const storage::TieredStore& store) {
  std::vector<coordinator::NodeBlock> blocks;
  for (const auto& [tier, h] : store.Holdings()) {
    blocks.push_back({h.key, h.first_in_chain, h.parent, ToTier(tier), 0, h.priority,
                      h.retention_left_ms, h.salt_scope});
  }
  return blocks;
}

}  // namespace kvtier::store
