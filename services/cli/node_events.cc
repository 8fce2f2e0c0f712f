#include "services/cli/node_events.h"

namespace kvtier::cli {
namespace {

kvtier::Tier ToTier(kvtier::Tier tier) {
  return tier == kvtier::Tier::kHost ? kvtier::Tier::kHost : kvtier::Tier::kDisk;
}

kvtier::BlockRetention Retention(const storage::BlockHeader& header) {
  return kvtier::BlockRetention{header.priority,
                                std::chrono::milliseconds(header.retention_left_ms)};
}

}  // namespace

coordinator::KvEvent ToKvEvent(const worker::WorkerEvent& event, coordinator::ScopeId scope) {
  coordinator::KvEvent out;
  out.keys = {event.key};
  out.tier = kvtier::Tier::kGpu;
  out.pool = static_cast<uint16_t>(event.pool_id);
  if (event.kind == worker::WorkerEvent::Kind::kStored) {
    out.kind = coordinator::KvEvent::Kind::kStored;
    out.scope = scope;
    if (!event.first) out.parent = event.parent;  // absent: the chain starts at the scope's root
    out.retention = {kvtier::BlockRetention{event.priority, event.retention}};
    out.tokens = event.tokens;
  } else {
    out.kind = coordinator::KvEvent::Kind::kRemoved;
  }
  return out;
}

coordinator::KvEvent ToKvEvent(const storage::StoreEvent& event, coordinator::ScopeId scope) {
  coordinator::KvEvent out;
  out.keys = {event.header.key};
  out.tier = ToTier(event.tier);
  switch (event.kind) {
    case storage::StoreEvent::Kind::kStored:
      out.kind = coordinator::KvEvent::Kind::kStored;
      out.scope = scope;
      if (!event.header.first_in_chain) out.parent = event.header.parent;
      out.retention = {Retention(event.header)};
      break;
    case storage::StoreEvent::Kind::kRemoved:
      out.kind = coordinator::KvEvent::Kind::kRemoved;
      break;
  }
  return out;
}

coordinator::SnapshotBlock ToSnapshotBlock(kvtier::Tier tier, const storage::BlockHeader& header,
                                           coordinator::ScopeId scope) {
  coordinator::SnapshotBlock block;
  block.key = header.key;
  if (!header.first_in_chain) block.parent = header.parent;
  block.scope = scope;
  block.tier = ToTier(tier);
  block.retention = Retention(header);
  return block;
}

coordinator::SnapshotBlock ToSnapshotBlock(uint32_t pool_id, const worker::PoolHolding& holding,
                                           coordinator::ScopeId scope) {
  coordinator::SnapshotBlock block;
  block.key = holding.key;
  if (!holding.first) block.parent = holding.parent;
  block.scope = scope;
  block.tier = kvtier::Tier::kGpu;
  block.pool = static_cast<uint16_t>(pool_id);
  block.retention = {holding.priority, holding.retention_left};
  block.tokens = holding.tokens;
  return block;
}

}  // namespace kvtier::cli
