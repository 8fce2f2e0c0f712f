#include "services/cli/embedded_cluster.h"

#include "services/cli/local_node.h"
#include "services/coordinator/rpc/coordinator_node.h"

namespace kvtier::cli {

Result<std::unique_ptr<EmbeddedCluster>> EmbeddedCluster::Create(EmbeddedClusterOptions options) {
  if (options.registry == nullptr)
    return InvalidArgumentError("EmbeddedClusterOptions.registry is required");
  std::unique_ptr<EmbeddedCluster> cluster(new EmbeddedCluster());
  const KvtierConfig& config = options.config;
  if (options.local_node) {
    Result<std::unique_ptr<LocalNode>> local =
        LocalNode::Create(config, options.node_id, *options.registry, options.gpu);
    if (!local.ok()) return local.status().WithContext("worker and store");
    cluster->local_ = std::move(local).value();
  }
  coordinator::CoordinatorNodeOptions node;
  node.node_id = options.node_id;
  node.roles = {"coordinator"};
  if (cluster->local_) KVTIER_RETURN_IF_ERROR(cluster->local_->Embed(node, options.event_tick));
  node.rpc = config.coordinator;
  node.connections = config.connections;
  node.lease_ttl = std::chrono::milliseconds(config.coordinator.lease_ttl_ms);
  node.tls = config.tls;
  Result<std::vector<coordinator::EngineSource>> engines =
      coordinator::ResolveEngineSources(config.coordinator.engines, options.tokens);
  if (!engines.ok()) return engines.status().WithContext("coordinator.engines");
  node.engines = std::move(engines).value();
  // `kvtier up`'s SDK clients key prompts at its worker's block size.
  node.sdk_tokens_per_block =
      options.local_node ? config.worker.tokens_per_block : config.coordinator.sdk_tokens_per_block;
  node.tokens = std::move(options.tokens);
  node.registry = options.registry;
  Result<std::unique_ptr<coordinator::CoordinatorNode>> started =
      coordinator::CoordinatorNode::Create(std::move(node));
  if (!started.ok()) return started.status().WithContext("coordinator");
  cluster->coordinator_ = std::move(started).value();
  return cluster;
}

EmbeddedCluster::~EmbeddedCluster() { Shutdown(); }

const std::vector<std::string>& EmbeddedCluster::endpoints() const {
  return coordinator_->endpoints();
}
const std::vector<std::string>& EmbeddedCluster::http_endpoints() const {
  return coordinator_->http_endpoints();
}
Status EmbeddedCluster::ReconfigureEngines(std::vector<coordinator::EngineSource> engines) {
  return coordinator_->ReconfigureEngines(std::move(engines));
}
Status EmbeddedCluster::Readiness() const { return coordinator_->Readiness(); }
bool EmbeddedCluster::tls() const { return coordinator_->tls(); }

void EmbeddedCluster::Shutdown() {
  if (coordinator_) coordinator_->Shutdown();
}

}  // namespace kvtier::cli
