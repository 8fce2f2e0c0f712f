// `kvtier worker`: a worker node of its own (services/worker/rpc/worker_node.h), its
// metrics endpoint, and on SIGTERM a drain: leave the coordinator, stop serving, flush
// the node's disk tier, exit 0.
#include <signal.h>

#include <atomic>
#include <cstdio>

#include <spdlog/spdlog.h>

#include "common/http_server.h"
#include "common/version.h"
#include "services/cli/serve.h"
#include "services/worker/rpc/worker_node.h"

namespace kvtier::cli::serve_internal {

int ServeWorker(const KvtierConfig& config, auth::TokenStore tokens, const std::string& auth_summary,
                MetricsRegistry& registry, int gpu) {
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

  // Ready once the coordinator knows the node (routing and lookups can name it).
  std::atomic<bool> draining{false};
  worker::WorkerNode* worker_node = node->get();
  MetricsHttpServerOptions http_options;
  http_options.bind_address = config.metrics.bind;
  http_options.port = config.metrics.port;
  http_options.registry = &registry;
  http_options.readiness = [worker_node, &draining]() -> Status {
    if (draining) return UnavailableError("draining");
    return worker_node->registered() ? Status::Ok() : UnavailableError("not registered with the coordinator yet");
  };
  Result<std::unique_ptr<MetricsHttpServer>> http = MetricsHttpServer::Create(std::move(http_options));
  if (!http.ok()) {
    spdlog::error("metrics endpoint: {}", http.status().message());
    return ExitCodeFor(http.status());
  }

  std::printf("kvtier %s worker\n", kVersion);
  std::printf("  rpc          %s\n", (*node)->endpoints().front().c_str());
  std::printf("  metrics      %s/metrics\n", (*http)->endpoint().c_str());
  std::printf("  health       %s/healthz  %s/readyz\n", (*http)->endpoint().c_str(), (*http)->endpoint().c_str());
  std::printf("  coordinator  %s\n", config.node.coordinator.c_str());
  std::printf("  data dir     %s\n", config.data_dir.c_str());
  std::printf("  auth         %s\n", auth_summary.c_str());
  std::printf("  node         %s; host tier %llu MiB, disk tier %llu MiB\n", (*node)->Summary().c_str(),
              static_cast<unsigned long long>(config.store.host_cache_bytes >> 20),
              static_cast<unsigned long long>(config.store.disk_bytes >> 20));
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
  spdlog::info("drained: left the coordinator; stopped cleanly");
  return 0;
}

}  // namespace kvtier::cli::serve_internal
