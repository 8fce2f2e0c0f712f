#include "services/rpc/gcc_kj_workaround.h"  // first: before any KJ header
#include "services/worker/rpc/peers/node_connections.h"

#include "common/mutex.h"
#include "services/rpc/rpc_client_impl.h"
#include "services/rpc/schema/coordinator.capnp.h"
#include "services/rpc/schema/kvtier.capnp.h"

namespace kvtier::worker {

namespace schema = kvtier::rpc::schema;

Result<std::unique_ptr<NodeConnections>> NodeConnections::Create(NodeConnectionsOptions options) {
  if (options.coordinator_address.empty()) {
    return InvalidArgumentError("NodeConnectionsOptions.coordinator_address is empty");
  }
  TlsContextPtr stream_tls;
  if (!options.tls_ca_file.empty()) {
    KVTIER_ASSIGN_OR_RETURN(stream_tls, MakeTlsClientContext(options.tls_ca_file));
  }
  return std::unique_ptr<NodeConnections>(
      new NodeConnections(std::move(options), std::move(stream_tls)));
}

Result<std::string> NodeConnections::Resolve(const std::string& node_id) {
  {
    MutexLock lock(mu_);
    if (auto it = resolved_.find(node_id);
        it != resolved_.end() && it->second.expires > std::chrono::steady_clock::now()) {
      if (it->second.address.empty())
        return NotFoundError("node " + node_id + " is not live at the coordinator");
      return it->second.address;
    }
  }
  KVTIER_ASSIGN_OR_RETURN(std::string address, AskCoordinator(node_id));
  {
    MutexLock lock(mu_);
    resolved_[node_id] = {address, std::chrono::steady_clock::now() + options_.resolve_ttl};
  }
  if (address.empty()) return NotFoundError("node " + node_id + " is not live at the coordinator");
  return address;
}

// The coordinator's answer for one node: its address, or empty when it is not live.
Result<std::string> NodeConnections::AskCoordinator(const std::string& node_id) {
  Result<std::shared_ptr<rpc::RpcClient>> coordinator = Connect(options_.coordinator_address);
  if (!coordinator.ok())
    return coordinator.status().WithContext("the coordinator at " + options_.coordinator_address);
  Result<std::string> address =
      (*coordinator)
          ->impl()
          .Call<Result<std::string>>([&](schema::Session::Client& session) {
            auto request =
                session.coordinatorRequest().send().getCoordinator().resolveNodesRequest();
            request.initNodeIds(1).set(0, node_id);
            return request.send().then([](auto response) -> Result<std::string> {
              for (auto n : response.getNodes()) return std::string(n.getRpcAddress().cStr());
              return std::string();
            });
          })
          .get();
  if (!address.ok() && address.status().code() == StatusCode::kUnavailable)
    Forget(options_.coordinator_address);
  return address;
}

Result<std::shared_ptr<rpc::RpcClient>> NodeConnections::Connect(const std::string& address) {
  {
    MutexLock lock(mu_);
    if (auto it = connections_.find(address); it != connections_.end()) {
      if (it->second->connected()) return it->second;
      connections_.erase(it);  // the peer closed it (restarted, or gone): connect afresh
    }
  }
  // Connecting blocks this thread only; two threads racing keep the first connection.
  rpc::RpcClientOptions connect;
  connect.address = address;
  connect.token = options_.token;
  connect.tls_ca_file = options_.tls_ca_file;
  connect.timeout = options_.timeout;
  connect.max_message_bytes = options_.max_message_bytes;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<rpc::RpcClient> client,
                          rpc::RpcClient::Connect(std::move(connect)));
  MutexLock lock(mu_);
  return connections_.try_emplace(address, std::move(client)).first->second;
}

void NodeConnections::Forget(const std::string& address) {
  MutexLock lock(mu_);
  connections_.erase(address);
  for (auto it = resolved_.begin(); it != resolved_.end();) {
    it = it->second.address == address ? resolved_.erase(it) : std::next(it);
  }
}

}  // namespace kvtier::worker
