// For the worker's cross-node tests: a coordinator whose own endpoint also serves a
// BlockStore, with a store node registered at that endpoint, so that a node id resolves
// (Coordinator.resolveNodes) to a BlockStore this test controls. One process stands in
// for a cluster of two.
#pragma once

#include <capnp/ez-rpc.h>

#include <functional>
#include <memory>
#include <string>

#include "services/coordinator/rpc/coordinator_node.h"
#include "services/rpc/schema/kvtier.capnp.h"

namespace kvtier::worker::testing {

using StoreFactory = std::function<kj::Own<capnp::Capability::Server>(const auth::Tenant&)>;

// `listen`: where (a restart passes the address it had before); `lease_ttl`: how long the
// registered node stays live (it sends no heartbeat).
inline std::unique_ptr<coordinator::CoordinatorNode> StartCoordinatorWithStoreNode(
    MetricsRegistry& registry, StoreFactory store, const std::string& node_id,
    const std::string& listen = "127.0.0.1:0", Nanos lease_ttl = std::chrono::seconds(10)) {
  namespace schema = kvtier::rpc::schema;
  coordinator::CoordinatorNodeOptions options;
  options.rpc.listen = {listen};
  options.registry = &registry;
  options.store = std::move(store);
  options.lease_ttl = lease_ttl;  // the node registered here never heartbeats
  auto node = coordinator::CoordinatorNode::Create(std::move(options)).value();
  capnp::EzRpcClient client(node->endpoints()[0]);
  auto auth = client.getMain<schema::Bootstrap>().authenticateRequest();
  auth.setToken("auth is off");
  auto session = auth.send().wait(client.getWaitScope()).getSession();
  auto reg = session.coordinatorRequest().send().getCoordinator().registerRequest();
  reg.initNode().setNodeId(node_id);
  reg.getNode().setRole(schema::NodeRole::STORE);
  reg.getNode().setRpcAddress(node->endpoints()[0]);
  reg.getNode().setIncarnation(1);
  reg.send().wait(client.getWaitScope());
  return node;
}

}  // namespace kvtier::worker::testing
