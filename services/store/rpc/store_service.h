// The BlockStore capability: a thin `final` adapter from the RPC schema
// (services/rpc/schema/store.capnp) to a node's TieredStore (storage/tiered_store.h).
//
// One capability per session. A tenant session is bound to the tenant's salt scope: every
// block it writes carries that scope and every read looks under it, so a tenant never
// sees another's blocks, whatever the request says. A node session (a node credential:
// services/auth/token_store.h) names the scope in each request instead: a worker fetching
// a tenant's blocks on its behalf. Payloads travel inline (Data fields) and are read
// straight into the response message (one copy out of the tier).
//
// A worker node also serves the blocks of its pool to peers: `extra` (optional) answers
// the gets that the tiers miss.
//
// Thread safety: runs on the RPC server's event-loop thread; the store is safe from any.
// Ownership: the store outlives every capability made from it.
#pragma once

#include <span>

#include <capnp/capability.h>

#include "services/auth/token_store.h"
#include "storage/tiered_store.h"

namespace kvtier::store {

struct StoreServiceLimits {
  uint64_t max_block_bytes = 256ull << 20;
  uint32_t max_blocks_per_call = 4096;
};

// Blocks a node holds outside its tiers (a worker's pool), read-only.
class ExtraBlockSource {
 public:
  virtual ~ExtraBlockSource() = default;
  // The header of the block `ref` names (its checksum computed), kNotFound when this
  // source lacks it; its payload into `out` (REQUIRES: out.size() == payload_bytes).
  [[nodiscard]] virtual Result<storage::BlockHeader> Peek(const storage::BlockRef& ref) = 0;
  [[nodiscard]] virtual Result<storage::BlockHeader> Read(const storage::BlockRef& ref, std::span<uint8_t> out) = 0;
};

struct BlockStoreServiceOptions {
  storage::TieredStore* store = nullptr;  // required
  ExtraBlockSource* extra = nullptr;      // optional; outlives the capability
  StoreServiceLimits limits;
};

[[nodiscard]] capnp::Capability::Client MakeBlockStoreService(const BlockStoreServiceOptions& options,
                                                              const auth::Tenant& tenant);
[[nodiscard]] inline capnp::Capability::Client MakeBlockStoreService(storage::TieredStore& store,
                                                                     const auth::Tenant& tenant,
                                                                     StoreServiceLimits limits = {}) {
  return MakeBlockStoreService(BlockStoreServiceOptions{&store, nullptr, limits}, tenant);
}

}  // namespace kvtier::store
