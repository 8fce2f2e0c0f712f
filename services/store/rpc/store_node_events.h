// A node's tiers as the coordinator's node stream sees them
// (services/coordinator/rpc/node_link.h): placement events and snapshot blocks. Used by
// every node process that has tiers (`kvtier store`, `kvtier worker`).
//
// Thread safety: pure functions (Holdings is the store's, safe from any thread).
#pragma once

#include <vector>

#include "services/coordinator/rpc/node_link.h"
#include "storage/tiered_store.h"

namespace kvtier::store {

[[nodiscard]] coordinator::NodeEvent ToNodeEvent(const storage::StoreEvent& event);
// The store's tiers as it registers them: pool 0 of each tier it has, by bytes.
[[nodiscard]] std::vector<coordinator::NodePool> ToNodePools(const storage::TieredStore& store);
// Everything the store holds, for a snapshot.
[[nodiscard]] std::vector<coordinator::NodeBlock> ToNodeBlocks(const storage::TieredStore& store);

}  // namespace kvtier::store
