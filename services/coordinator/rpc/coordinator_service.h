// The Coordinator capability: a thin `final` adapter from the RPC schema
// (services/rpc/schema/coordinator.capnp) to the plain Coordinator library. Each method
// converts its parameters, calls the library and converts the result; a library Status
// becomes an RPC error through services/rpc/status_mapping.h.
//
// One capability per session: lookups and routes run under the tenant's salt scope;
// nodes (sessions with a node credential) register and publish events that carry each
// block's scope. Tenant sessions cannot register or publish.
//
// Thread safety: every capability and the state run on the RPC server's event-loop thread.
// Ownership: `state` outlives every capability made from it.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include <capnp/capability.h>

#include "services/coordinator/cluster/coordinator.h"
#include "services/coordinator/cluster/scope_registry.h"
#include "services/coordinator/rpc/coordinator_metrics.h"

namespace kvtier::coordinator {

struct CoordinatorState {
  std::unique_ptr<Coordinator> coordinator;
  std::unique_ptr<CoordinatorMetrics> metrics;
  ScopeRegistry scopes;
  std::unordered_map<std::string, std::string> rpc_addresses;       // node -> address, for Route
  std::unordered_map<std::string, NodeSnapshot> pending_snapshots;  // chunks until `last`
  std::function<void(std::span<const BlockKey>)> on_lookup;  // the prompt's keys, every lookup
  ConnectionId next_connection = kNoConnection + 1;          // one per capability made
  std::unordered_set<std::string> refused_names;  // name conflicts logged, until resolved
};

// Who the session is: its tenant's salt scope, and whether it holds a node credential
// (only nodes may register and publish).
struct CoordinatorSession {
  uint64_t salt_scope = 0;
  bool node = false;
  KeySalt salt = {};  // the tenant's key space: applied to every key a lookup or route names
};

// The capability's server (the session counts and times its calls: services/rpc/timed_server.h).
[[nodiscard]] kj::Own<capnp::Capability::Server> MakeCoordinatorService(CoordinatorState& state,
                                                                        CoordinatorSession session);

}  // namespace kvtier::coordinator
