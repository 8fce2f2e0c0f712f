// TimeCalls: a capability whose every call is counted and timed in RpcMetrics under
// "<Interface>.<method>" ("Worker.allocate", "Coordinator.lookup", "BlockStore.get"):
// kvtier_rpc_requests_total{method, code} and kvtier_rpc_request_duration_seconds{method},
// from the call's dispatch on the server's loop to the end of its promise, so that work a
// call queued to another thread (a worker of its own, a peer fetch) counts, and the
// connection's earlier calls ahead of it do not. A call that throws counts under the code
// its exception maps to (status_mapping.h).
//
// The session (session_service.h) wraps every capability it hands out, so each service
// is timed in one place, whatever node runs it.
//
// Thread safety: the capability runs on its server's event-loop thread, as `server` did.
// Ownership: the capability owns `server`; `metrics` outlives it.
// REQUIRES: `server` implements `schema` and never calls thisCap() (the capability's own
// server is the wrapper).
#pragma once

#include <capnp/capability.h>
#include <capnp/schema.h>

#include "services/rpc/rpc_metrics.h"

namespace kvtier::rpc {

// Null `metrics`: the server as it is, untimed.
[[nodiscard]] capnp::Capability::Client TimeCalls(kj::Own<capnp::Capability::Server> server,
                                                  capnp::InterfaceSchema schema,
                                                  RpcMetrics* metrics);

}  // namespace kvtier::rpc
