// A stored block's header (storage/block_header.h) and a data stream's transfer ticket
// (services/store/stream/protocol.h) to and from their RPC forms
// (services/rpc/schema/store.capnp), for the BlockStore capability and its clients. Only
// RPC layers include this header.
//
// Thread safety: pure functions.
#pragma once

#include "services/rpc/schema/store.capnp.h"
#include "services/store/stream/protocol.h"
#include "storage/block_header.h"

namespace kvtier::store {

// `scope`: the session's salt scope, which the header takes whatever the wire says.
// kInvalidArgument for an oversized format tag, kResourceExhausted for a new one past
// storage::FormatTag::kMaxFormatTags.
[[nodiscard]] Result<storage::BlockHeader> FromWire(rpc::schema::BlockHeader::Reader h,
                                                    uint64_t scope);
void ToWire(const storage::BlockHeader& header, rpc::schema::BlockHeader::Builder h);

[[nodiscard]] TransferTicket FromWire(rpc::schema::TransferTicket::Reader t);
void ToWire(const TransferTicket& ticket, rpc::schema::TransferTicket::Builder t);

}  // namespace kvtier::store
