// The bootstrap and session capabilities every kvtier listener serves.
//
// MakeBootstrap() returns a fresh Bootstrap capability for one connection. Its only method,
// authenticate(token), checks the token with the TokenStore and returns a Session scoped
// to that tenant; an engine's Session derives its other tenants' sessions (actFor). A connection gets at most kMaxAuthFailures wrong tokens; after that
// every attempt fails. Across connections, the listener's gate budgets failures per
// address (connection_gate.h): a token is not checked while its address's budget is spent,
// so a client cannot guess tokens at line rate by reconnecting either.
//
// The classes behind the capabilities are thin `final` adapters: each method converts
// its parameters, calls a plain C++ object and converts the result or Status back. Every
// call of the session's own and of the capabilities it hands out is counted and timed
// in `metrics` (rpc_metrics.h).
//
// Thread safety: the capabilities run on the RpcServer's event-loop thread only.
// Ownership: `context` and everything it points to outlive the server.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <capnp/capability.h>

#include "common/clock.h"
#include "services/auth/token_store.h"
#include "services/rpc/connection_gate.h"
#include "services/rpc/rpc_metrics.h"
#include "services/rpc/rpc_server.h"

namespace kvtier::rpc {

inline constexpr int kMaxAuthFailures = 5;
inline constexpr size_t kMaxPingPayloadBytes = size_t{64} * 1024;

struct ServerIdentity {
  std::string node_id;
  std::vector<std::string> roles;  // "coordinator", "worker", "store"
};

// Makes the server of a capability for a tenant. The session hands it out with its calls
// counted and timed in the session's metrics (timed_server.h).
using ServerFactory = std::function<kj::Own<capnp::Capability::Server>(const auth::Tenant&)>;

struct SessionContext {
  ServerIdentity identity;
  const auth::TokenStore* tokens = nullptr;
  const Clock* clock = nullptr;
  RpcMetrics* metrics = nullptr;  // optional
  // Makes the Coordinator capability for a tenant; empty where this process runs no
  // coordinator (Session.coordinator() then answers UNAVAILABLE).
  ServerFactory coordinator;
  // Makes the Worker capability (the node's pools) for a tenant; empty where this
  // process runs no worker (Session.worker() then answers UNAVAILABLE). Called once per
  // Session.worker() call: a capability is one client, released with its connection.
  ServerFactory worker;
  // Makes the BlockStore capability (the node's tiers) for a tenant; empty where this
  // process serves no blocks (Session.store() then answers UNAVAILABLE).
  ServerFactory store;
};

// `gate` is the connection's, from the listener (rpc_server.h's BootstrapFactory).
[[nodiscard]] capnp::Capability::Client MakeBootstrap(const SessionContext& context,
                                                      std::shared_ptr<ConnectionGate> gate);

// The RpcServer factory that makes each connection's Bootstrap over `context`.
// REQUIRES: `context` outlives the server.
[[nodiscard]] BootstrapFactory SessionBootstraps(const SessionContext& context);

}  // namespace kvtier::rpc
