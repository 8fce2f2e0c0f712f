// What `kvtier store` and `kvtier worker` share once their node runs: the metrics
// endpoint with readiness = listening and registered with the coordinator, the banner, and the
// drain on SIGINT/SIGTERM (exit 0 when it succeeds).
#include <signal.h>

#include <atomic>
#include <cstdio>

#include <spdlog/spdlog.h>

#include "common/http_server.h"
#include "common/process_memory.h"
#include "common/version.h"
#include "services/cli/serve.h"

namespace kvtier::cli::serve_internal {

Result<std::string> CoordinatorToken(const KvtierConfig& config) {
  if (config.node.coordinator_token_file.empty()) return std::string();
  Result<std::string> token = auth::ReadTokenFile(config.node.coordinator_token_file);
  if (!token.ok())
    return InvalidArgumentError("node.coordinator_token_file: " + token.status().message());
  return token;
}

int RunNodeProcess(const KvtierConfig& config, MetricsRegistry& registry, const NodeProcess& node) {
  std::atomic<bool> draining{false};
  MetricsHttpServerOptions http_options;
  http_options.bind_address = config.metrics.bind;
  http_options.port = config.metrics.port;
  http_options.registry = &registry;
  http_options.tls_cert_file = config.tls.cert_file;  // a TLS node leaves no plaintext listener
  http_options.tls_key_file = config.tls.key_file;
  // Ready once the coordinator knows the node: before that nothing routes to it.
  http_options.readiness = [&node, &draining]() -> Status {
    if (draining) return UnavailableError("draining");
    KVTIER_RETURN_IF_ERROR(node.listening());
    return node.registered() ? Status::Ok()
                             : UnavailableError("not registered with the coordinator yet");
  };
  Result<std::unique_ptr<ProcessMemoryMetrics>> memory = ProcessMemoryMetrics::Create(registry);
  if (!memory.ok()) {
    spdlog::error("metrics: {}", memory.status().message());
    return ExitCodeFor(memory.status());
  }
  http_options.before_scrape = [memory = memory->get()] { memory->Update(); };
  Result<std::unique_ptr<MetricsHttpServer>> http =
      MetricsHttpServer::Create(std::move(http_options));
  if (!http.ok()) {
    spdlog::error("metrics endpoint: {}", http.status().message());
    return ExitCodeFor(http.status());
  }

  const std::string endpoint = (*http)->endpoint();
  std::printf("kvtier %s %s\n", kVersion, node.role.c_str());
  std::printf("  rpc          %s\n", node.rpc.c_str());
  std::printf("  metrics      %s/metrics\n", endpoint.c_str());
  std::printf("  health       %s/healthz  %s/readyz\n", endpoint.c_str(), endpoint.c_str());
  std::printf("  coordinator  %s\n", config.node.coordinator.c_str());
  std::printf("  data dir     %s\n", config.data_dir.c_str());
  for (const auto& [label, value] : node.banner)
    std::printf("  %-12s %s\n", label.c_str(), value.c_str());
  std::printf(
      "Stop with Ctrl-C or SIGTERM (drains: leaves the coordinator, flushes the disk tier).\n");
  std::fflush(stdout);

  const int signal_number = WaitForShutdownSignal();
  spdlog::info("received {}, draining", signal_number == SIGINT ? "SIGINT" : "SIGTERM");
  draining = true;
  const Status drained = node.drain();
  (*http)->Shutdown();
  if (!drained.ok()) {
    spdlog::error("drain: {}", drained.ToString());
    return 1;
  }
  spdlog::info("drained: left the coordinator, disk tier flushed; stopped cleanly");
  return 0;
}

}  // namespace kvtier::cli::serve_internal
