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
// Engines (services/coordinator/engines/): an EngineFeed thread follows their ZMQ streams and
// applies the updates on the server's thread (RpcServer::RunOnLoop); the routing API
// (http_api.h) is served on that thread too.
//
// Thread safety: Create(), endpoints(), ReconfigureEngines() and Shutdown() from one
// controlling thread; the
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
#include "services/coordinator/engines/engine_feed.h"

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
  // Inference engines whose KV event streams join the index (ResolveEngineSources), and
  // the block size of SDK clients' keys for the routing API (rpc.http_listen).
  std::vector<EngineSource> engines = {};
  uint32_t sdk_tokens_per_block = 16;
};

// The engines of a configuration, each with its tenant's key space from `tokens` (no
// tenant: the unsalted key space of auth off and of `kvtier up`'s local user).
// kNotFound naming an engine whose tenant the token file does not hold; kInvalidArgument
// for a bad format.
[[nodiscard]] Result<std::vector<EngineSource>> ResolveEngineSources(
    const std::vector<EngineConfig>& engines, const auth::TokenStore& tokens);

class CoordinatorNode {
 public:
  [[nodiscard]] static Result<std::unique_ptr<CoordinatorNode>> Create(
      CoordinatorNodeOptions options);
  ~CoordinatorNode();

  const std::vector<std::string>& endpoints() const;
  // The routing API's bound addresses (empty when rpc.http_listen is).
  const std::vector<std::string>& http_endpoints() const;
  // Follows `engines` from now on: removed ones leave the index, new ones join it.
  [[nodiscard]] Status ReconfigureEngines(std::vector<EngineSource> engines);
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
