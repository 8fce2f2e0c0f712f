// `kvtier store`: a storage node of its own (services/store/rpc/store_node.h), its metrics
// endpoint, and the drain on SIGTERM that the Kubernetes StatefulSet's grace period is
// sized for: leave the coordinator, stop serving, flush the disk tier, exit 0.
#include <signal.h>

#include <atomic>
#include <cstdio>

#include <spdlog/spdlog.h>

#include "common/http_server.h"
#include "common/version.h"
#include "services/cli/serve.h"
#include "services/store/rpc/store_node.h"

namespace kvtier::cli::serve_internal {

Result<std::string> CoordinatorToken(const KvtierConfig& config) {
  if (config.node.coordinator_token_file.empty()) return std::string();
  Result<std::string> token = auth::ReadTokenFile(config.node.coordinator_token_file);
  if (!token.ok()) return InvalidArgumentError("node.coordinator_token_file: " + token.status().message());
  return token;
}

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

  // Ready once the coordinator knows the node: before that its blocks would be invisible.
  std::atomic<bool> draining{false};
  MetricsHttpServerOptions http_options;
  http_options.bind_address = config.metrics.bind;
  http_options.port = config.metrics.port;
  http_options.registry = &registry;
  store::StoreNode* store_node = node->get();
  http_options.readiness = [store_node, &draining]() -> Status {
    if (draining) return UnavailableError("draining");
    return store_node->registered() ? Status::Ok() : UnavailableError("not registered with the coordinator yet");
  };
  Result<std::unique_ptr<MetricsHttpServer>> http = MetricsHttpServer::Create(std::move(http_options));
  if (!http.ok()) {
    spdlog::error("metrics endpoint: {}", http.status().message());
    return ExitCodeFor(http.status());
  }

  std::printf("kvtier %s store\n", kVersion);
  std::printf("  rpc          %s\n", (*node)->endpoints().front().c_str());
  std::printf("  metrics      %s/metrics\n", (*http)->endpoint().c_str());
  std::printf("  health       %s/healthz  %s/readyz\n", (*http)->endpoint().c_str(), (*http)->endpoint().c_str());
  std::printf("  coordinator  %s\n", config.node.coordinator.c_str());
  std::printf("  data dir     %s\n", config.data_dir.c_str());
  std::printf("  auth         %s\n", auth_summary.c_str());
  std::printf("  tiers        host %llu MiB, disk %llu MiB (%s)\n",
              static_cast<unsigned long long>(config.store.host_cache_bytes >> 20),
              static_cast<unsigned long long>(config.store.disk_bytes >> 20), config.store.disk_sync.c_str());
  std::printf("Stop with Ctrl-C or SIGTERM (drains: leaves the coordinator, flushes the disk tier).\n");
  std::fflush(stdout);

  const int signal_number = WaitForShutdownSignal();
  spdlog::info("received {}, draining", signal_number == SIGINT ? "SIGINT" : "SIGTERM");
  draining = true;
  const Status drained = (*node)->Drain();
  (*http)->Shutdown();
  if (!drained.ok()) {
    spdlog::error("drain: {}", drained.ToString());
    return 1;
  }
  spdlog::info("drained: left the coordinator, disk tier flushed; stopped cleanly");
  return 0;
}

}  // namespace kvtier::cli::serve_internal
