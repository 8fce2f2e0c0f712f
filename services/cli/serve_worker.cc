// `kvtier worker`: a worker node of its own (services/worker/rpc/worker_node.h).
#include <spdlog/spdlog.h>

#include "services/cli/serve.h"
#include "services/worker/rpc/worker_node.h"

namespace kvtier::cli::serve_internal {

int ServeWorker(const KvtierConfig& config, auth::TokenStore tokens,
                const std::string& auth_summary, MetricsRegistry& registry, int gpu) {
  Result<std::string> coordinator_token = CoordinatorToken(config);
  if (!coordinator_token.ok()) {
    spdlog::error("{}", coordinator_token.status().message());
    return 2;
  }
  worker::WorkerNodeOptions options;
  options.config = config;
  options.tokens = std::move(tokens);
  options.registry = &registry;
  options.name = config.node.name.empty() ? HostName() : config.node.name;
  options.coordinator_token = *coordinator_token;
  options.gpu = gpu;
  Result<std::unique_ptr<worker::WorkerNode>> node = worker::WorkerNode::Create(std::move(options));
  if (!node.ok()) {
    spdlog::error("worker: {}", node.status().message());
    return ExitCodeFor(node.status());
  }
  worker::WorkerNode* worker_node = node->get();
  const std::string tiers = "host " + std::to_string(config.store.host_cache_bytes >> 20) +
                            " MiB, disk " + std::to_string(config.store.disk_bytes >> 20) + " MiB";
  return RunNodeProcess(
      config, registry,
      {.role = "worker",
       .rpc = worker_node->endpoints().front(),
       .banner = {{"auth", auth_summary}, {"node", worker_node->Summary() + "; " + tiers}},
       .registered = [worker_node] { return worker_node->registered(); },
       .listening = [worker_node] { return worker_node->Readiness(); },
       .drain = [worker_node] { return worker_node->Drain(); }});
}

}  // namespace kvtier::cli::serve_internal
