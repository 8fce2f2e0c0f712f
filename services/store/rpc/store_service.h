// The BlockStore capability: a thin `final` adapter from the RPC schema
// (services/rpc/schema/store.capnp) to a node's TieredStore (storage/tiered_store.h).
//
// One capability per session. A tenant session is bound to the tenant's salt scope: every
// block it writes carries that scope and every read looks under it, so a tenant never
// sees another's blocks, whatever the request says. A node session (a node credential:
// services/auth/token_store.h) names the scope in each request instead: a worker fetching
// a tenant's blocks on its behalf. Payloads travel inline (put/get: Data fields, read
// straight into the response message) or, where the node runs a data stream
// (services/store/stream), on it: openPut/openGet check the request here and answer a
// ticket for the stream.
//
// A worker node also serves the blocks of its pool to peers: `extra` (optional) answers
// the gets that the tiers miss, inline, by openGet and by the data stream's keyed gets
// (which read it on this capability's loop: services/store/rpc/loop_bound_block_source.h).
//
// Thread safety: runs on the RPC server's event-loop thread; the store is safe from any.
// Ownership: the store outlives every capability made from it.
#pragma once

#include <functional>
#include <span>

#include <capnp/capability.h>

#include "services/auth/token_store.h"
#include "services/store/extra_block_source.h"
#include "services/store/stream/data_stream_server.h"
#include "storage/tiered_store.h"

namespace kvtier::store {

struct StoreServiceLimits {
  uint64_t max_block_bytes = 256ull << 20;
  uint32_t max_blocks_per_call = 4096;
};

struct BlockStoreServiceOptions {
  storage::TieredStore* store = nullptr;  // required
  ExtraBlockSource* extra = nullptr;      // optional; outlives the capability's event loop
  DataStreamServer* stream = nullptr;     // optional (openGet/openPut); outlives the capability
  // Optional: told the keys of every put, get and contains (inline or on the stream), on
  // the server's thread; a store feeds its disk admission filter with them.
  std::function<void(std::span<const BlockKey>)> on_request = {};
  StoreServiceLimits limits = {};
};

// The capability's server (the session counts and times its calls: services/rpc/timed_server.h).
[[nodiscard]] kj::Own<capnp::Capability::Server> MakeBlockStoreService(
    const BlockStoreServiceOptions& options, const auth::Tenant& tenant);
[[nodiscard]] inline kj::Own<capnp::Capability::Server> MakeBlockStoreService(
    storage::TieredStore& store, const auth::Tenant& tenant, StoreServiceLimits limits = {}) {
  return MakeBlockStoreService(BlockStoreServiceOptions{.store = &store, .limits = limits}, tenant);
}

}  // namespace kvtier::store
