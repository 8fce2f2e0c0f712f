// Conversions between the RPC schema's common types (services/rpc/schema/common.capnp)
// and kvtier's plain types, shared by every service's RPC layer. Generated types stay
// inside services/*/rpc: only RPC layers include this header.
//
// Thread safety: pure functions.
#pragma once

#include <span>
#include <vector>

#include "common/block_key.h"
#include "common/kv_layout.h"
#include "common/status.h"
#include "services/rpc/schema/common.capnp.h"

namespace kvtier::rpc {

inline BlockKey ToKey(schema::BlockKey::Reader k) { return {k.getHi(), k.getLo()}; }
inline void FromKey(const BlockKey& k, schema::BlockKey::Builder b) {
  b.setHi(k.hi);
  b.setLo(k.lo);
}
std::vector<BlockKey> ToKeys(capnp::List<schema::BlockKey>::Reader list);
std::vector<uint32_t> ToTokens(capnp::List<uint32_t>::Reader list);
void FromTokens(std::span<const uint32_t> tokens, capnp::List<uint32_t>::Builder out);

// kInvalidArgument naming the field for a layout the library refuses or an unknown dtype.
[[nodiscard]] Result<KvLayout> ToLayout(schema::KvLayout::Reader layout);
void FromLayout(const KvLayout& layout, schema::KvLayout::Builder builder);

}  // namespace kvtier::rpc
