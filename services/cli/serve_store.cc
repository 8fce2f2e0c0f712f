// `kvtier store`: a storage node of its own (services/store/rpc/store_node.h).
#include <spdlog/spdlog.h>

#include "services/cli/serve.h"
#include "services/store/rpc/store_node.h"

namespace kvtier::cli::serve_internal {

int ServeStore(const KvtierConfig& config, auth::TokenStore tokens, const std::string& auth_summary,
               MetricsRegistry& registry) {
  Result<std::string> coordinator_token = CoordinatorToken(config);
  if (!coordinator_token.ok()) {
    spdlog::error("{}", coordinator_token.status().message());
    return 2;
  }
  store::StoreNodeOptions options;
  options.config = config;
  options.tokens = std::move(tokens);
  options.registry = &registry;
  options.node_id = (config.node.name.empty() ? HostName() : config.node.name) + "/store";
  options.coordinator_token = *coordinator_token;
  Result<std::unique_ptr<store::StoreNode>> node = store::StoreNode::Create(std::move(options));
  if (!node.ok()) {
    spdlog::error("store: {}", node.status().message());
    return ExitCodeFor(node.status());
  }
  store::StoreNode* store_node = node->get();
  const std::string tiers = "host " + std::to_string(config.store.host_cache_bytes >> 20) +
                            " MiB, disk " + std::to_string(config.store.disk_bytes >> 20) +
                            " MiB (" + config.store.disk_sync + ")";
  return RunNodeProcess(config, registry,
                        {.role = "store",
                         .rpc = store_node->endpoints().front(),
                         .banner = {{"auth", auth_summary}, {"tiers", tiers}},
                         .registered = [store_node] { return store_node->registered(); },
                         .listening = [store_node] { return store_node->Readiness(); },
                         .drain = [store_node] { return store_node->Drain(); }});
}

}  // namespace kvtier::cli::serve_internal
