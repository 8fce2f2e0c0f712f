// Reads the coordinator's Lookup answer (LookupResult in
// services/rpc/schema/coordinator.capnp) into the SDK's LookupResult. The SDK asks for
// the compact form (LookupRequest.compactLocations); a coordinator older than that form
// answers the full one, so both are read: `blocks` when it lists the matched blocks,
// `nodes` / `locations` / `locationEnds` otherwise.
//
// An answer that contradicts itself (block counts that disagree, a node index past the
// node table, locations out of order, a tier this SDK does not know) is kInternal, with
// what was wrong: nothing of it is returned.
//
// Thread safety: a pure function of its argument.
#pragma once

#include "common/status.h"
#include "services/client/client.h"
#include "services/rpc/schema/coordinator.capnp.h"

namespace kvtier::client {

[[nodiscard]] Result<LookupResult> ReadLookupAnswer(rpc::schema::LookupResult::Reader answer);

}  // namespace kvtier::client
