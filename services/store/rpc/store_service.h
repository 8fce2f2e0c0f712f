// The BlockStore capability: a thin `final` adapter from the RPC schema
// (services/rpc/schema/store.capnp) to a node's TieredStore (storage/tiered_store.h).
//
// One capability per tenant session, bound to the tenant's salt scope: every block it
// writes carries that scope and every read looks under it, so a tenant never sees
// another's blocks, whatever the request says. Payloads travel inline (Data fields) and
// are read straight into the response message (one copy out of the tier).
//
// Thread safety: runs on the RPC server's event-loop thread; the store is safe from any.
// Ownership: the store outlives every capability made from it.
#pragma once

#include <capnp/capability.h>

#include "services/auth/token_store.h"
#include "storage/tiered_store.h"

namespace kvtier::store {

struct StoreServiceLimits {
  uint64_t max_block_bytes = 256ull << 20;
  uint32_t max_blocks_per_call = 4096;
};

[[nodiscard]] capnp::Capability::Client MakeBlockStoreService(storage::TieredStore& store, const auth::Tenant& tenant,
                                                              StoreServiceLimits limits = {});

}  // namespace kvtier::store
