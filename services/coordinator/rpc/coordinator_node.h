// CoordinatorNode: the coordinator role as a running RPC server.
//
// Serves the tenant session (services/rpc/session_service.h) on every configured listener
// (TCP and a Unix socket, plain or TLS) with the node's token store, and through it the
// Coordinator capability (services/coordinator/rpc/coordinator_service.h): the prefix
// index, membership and routing, ticked every quarter lease on the server's thread.
//
// Embedding (`kvtier up`): `worker` and `store` make the Session's Worker and BlockStore
// capabilities for a tenant,
// and `on_tick` runs with the coordinator's state at every tick, on the server's thread,
// so that nodes in the same process publish their events without a network hop.
//
// Thread safety: Create(), endpoints() and Shutdown() from one controlling thread; the
// server runs on its own event-loop thread (services/rpc/rpc_server.h), and so do the
// `worker` capabilities and `on_tick`.
// Ownership: owns its server, token store and RPC metrics; the registry and clock outlive it.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <capnp/capability.h>

#include "common/block_key.h"
#include "common/clock.h"
#include "common/config.h"
#include "common/metrics.h"
#include "services/auth/token_store.h"

namespace kvtier::coordinator {

struct CoordinatorState;

struct CoordinatorNodeOptions {
  std::string node_id = "coordinator";
  std::vector<std::string> roles = {"coordinator"};
  CoordinatorConfig rpc;
  ConnectionsConfig connections;
  TlsConfig tls;
  auth::TokenStore tokens = auth::TokenStore::Disabled();
  MetricsRegistry* registry = nullptr;  // required
  const Clock* clock = &SystemClock::Instance();
  Nanos lease_ttl = std::chrono::seconds(10);
  size_t expected_blocks = 1 << 20;  // index sizing: the cluster's total block capacity
  // The embedded roles' capability servers (rpc::ServerFactory); empty: none here.
  std::function<kj::Own<capnp::Capability::Server>(const auth::Tenant&)> worker;
  std::function<kj::Own<capnp::Capability::Server>(const auth::Tenant&)> store;
  std::function<void(CoordinatorState&)> on_tick;
  Nanos tick_interval{0};  // 0: a quarter of the lease
  // Sees the keys of every lookup, on the server's thread (an embedded store's admission
  // filter counts them).
  std::function<void(std::span<const BlockKey>)> on_lookup;
};

class CoordinatorNode {
 public:
  [[nodiscard]] static Result<std::unique_ptr<CoordinatorNode>> Create(CoordinatorNodeOptions options);
  ~CoordinatorNode();

  const std::vector<std::string>& endpoints() const;
  // Ok while its listeners accept connections (rpc_server.h's Readiness()).
  [[nodiscard]] Status Readiness() const;
  bool tls() const;
  void Shutdown();

  class Impl;

 private:
  explicit CoordinatorNode(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::coordinator
