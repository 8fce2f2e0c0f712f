// Conversions from the events of a worker and of a node's tiers to the coordinator's.
//
// A worker's pool is the primary tier (Tier::kGpu, on host memory where there is no GPU).
// A worker's "offloaded" becomes "removed" from the pool: the node's store, registered as
// a node of its own, reports where the block went (host or disk) in its own stream.
//
// Thread safety: pure functions.
#pragma once

#include "services/coordinator/cluster/coordinator.h"
#include "services/worker/worker.h"
#include "storage/tiered_store.h"

namespace kvtier::cli {

// `scope`: the coordinator's id of the event's salt scope (used by stored events).
[[nodiscard]] coordinator::KvEvent ToKvEvent(const worker::WorkerEvent& event,
                                             coordinator::ScopeId scope);
[[nodiscard]] coordinator::KvEvent ToKvEvent(const storage::StoreEvent& event,
                                             coordinator::ScopeId scope);
[[nodiscard]] coordinator::SnapshotBlock ToSnapshotBlock(kvtier::Tier tier,
                                                         const storage::BlockHeader& header,
                                                         coordinator::ScopeId scope);
[[nodiscard]] coordinator::SnapshotBlock ToSnapshotBlock(uint32_t pool_id,
                                                         const worker::PoolHolding& holding,
                                                         coordinator::ScopeId scope);

}  // namespace kvtier::cli
