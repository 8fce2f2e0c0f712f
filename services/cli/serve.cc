#include "services/cli/serve.h"

#include <signal.h>
#include <unistd.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <spdlog/spdlog.h>

#include "common/http_server.h"
#include "common/process_memory.h"
#include "common/version.h"
#include "gpu/device.h"
#include "services/auth/token_file_watcher.h"
#include "services/auth/token_store.h"
#include "services/cli/embedded_cluster.h"
#include "services/cli/local_node.h"
#include "services/coordinator/rpc/coordinator_node.h"

namespace kvtier::cli {
namespace {

using serve_internal::ExitCodeFor;
using serve_internal::HostName;
using serve_internal::WaitForShutdownSignal;

constexpr int kExitStartFailure = 1;
constexpr int kExitConfigError = 2;

struct ResolvedAuth {
  auth::TokenStore tokens = auth::TokenStore::Disabled();
  std::string summary;          // the banner line
  bool generate_token = false;  // `up` without a token file: make one once data_dir exists
};

// Writes a generated token where local clients find it, readable by the owner only.
Status WriteTokenFile(const std::string& path, const std::string& token) {
  std::ofstream out(path, std::ios::trunc);
  out << token << "\n";
  out.close();
  if (!out || chmod(path.c_str(), S_IRUSR | S_IWUSR) != 0) {
    return UnavailableError("cannot write the generated token to " + path);
  }
  return Status::Ok();
}

Result<ResolvedAuth> ResolveAuth(Role role, const KvtierConfig& config) {
  ResolvedAuth out;
  if (!config.auth.enabled) {
    out.summary =
        "OFF (auth.enabled=false): any client can read and write every cache. Local use only!";
    return out;
  }
  if (!config.auth.token_file.empty()) {
    KVTIER_ASSIGN_OR_RETURN(out.tokens, auth::TokenStore::FromFile(config.auth.token_file));
    out.summary = "on, " + std::to_string(out.tokens.tenant_count()) + " tenant(s) from " +
                  config.auth.token_file;
    return out;
  }
  if (role != Role::kUp) {
    return InvalidArgumentError(
        "auth.token_file: required when auth.enabled is true (or set --auth-enabled false for "
        "local use only)");
  }
  out.generate_token = true;
  return out;
}

// `up` with no token file: a fresh random token for one local tenant, saved in data_dir.
Status GenerateLocalToken(const KvtierConfig& config, ResolvedAuth& auth) {
  const std::string token = auth::GenerateToken();
  const std::string path = config.data_dir + "/token";
  KVTIER_RETURN_IF_ERROR(WriteTokenFile(path, token));
  KVTIER_ASSIGN_OR_RETURN(auth.tokens,
                          auth::TokenStore::SingleTenant(auth::LocalUser("default"), token));
  auth.summary = "on, tenant \"default\" (its token has every right), token " + token +
                 " (also in " + path + ")";
  return Status::Ok();
}

// kvtier_role_info{role} is 1 for each role the process runs: dashboards and alerts count
// a cluster's coordinators, workers and stores by it, whether embedded (`up`) or alone.
Status RegisterProcessMetrics(MetricsRegistry& registry, bool cuda, Role role) {
  KVTIER_ASSIGN_OR_RETURN(
      GaugeFamily * info,
      registry.AddGauge("kvtier_build_info", "Always 1; labels describe the build.",
                        {"version", "cuda"}));
  info->WithLabels({kVersion, cuda ? "true" : "false"}).Set(1);
  KVTIER_ASSIGN_OR_RETURN(
      GaugeFamily * roles,
      registry.AddGauge("kvtier_role_info", "1 for each role this process runs.", {"role"}));
  if (role == Role::kStore || role == Role::kWorker) {
    if (role == Role::kWorker) roles->WithLabels({"worker"}).Set(1);
    roles->WithLabels({"store"}).Set(1);  // a worker serves its node's tiers too
    return Status::Ok();
  }
  roles->WithLabels({"coordinator"}).Set(1);
  if (role == Role::kUp) {
    roles->WithLabels({"worker"}).Set(1);
    roles->WithLabels({"store"}).Set(1);
  }
  return Status::Ok();
}

void PrintBanner(Role role, const KvtierConfig& config, const EmbeddedCluster& node,
                 const MetricsHttpServer& http, const std::string& auth_summary) {
  const LocalNode* local = node.local();
  std::string rpc_endpoints;
  for (const std::string& e : node.endpoints())
    rpc_endpoints += (rpc_endpoints.empty() ? "" : ", ") + e;
  std::printf("kvtier %s %s\n", kVersion, role == Role::kUp ? "up" : "coordinator");
  std::printf("  rpc       %s%s\n", rpc_endpoints.c_str(), node.tls() ? " (TLS)" : "");
  std::printf("  metrics   %s/metrics\n", http.endpoint().c_str());
  std::printf("  health    %s/healthz  %s/readyz\n", http.endpoint().c_str(),
              http.endpoint().c_str());
  std::printf("  data dir  %s\n", config.data_dir.c_str());
  std::printf("  auth      %s\n", auth_summary.c_str());
  std::printf("  roles     coordinator (prefix index, membership, routing)%s\n",
              local != nullptr ? ", worker, store" : "");
  if (local != nullptr) std::printf("  node      %s\n", local->Summary().c_str());
  for (const std::string& e : node.http_endpoints()) {
    std::printf("  routing   %s://%s/v1/lookup  /v1/route\n", node.tls() ? "https" : "http",
                e.c_str());
  }
  for (const EngineConfig& e : config.coordinator.engines) {
    std::printf("  engine    %s (%s, %u tokens a block%s%s) events %s%s%s\n", e.name.c_str(),
                e.format.c_str(), e.tokens_per_block, e.tenant.empty() ? "" : ", tenant ",
                e.tenant.c_str(), e.events.c_str(), e.replay.empty() ? "" : " replay ",
                e.replay.c_str());
  }
  std::printf("Stop with Ctrl-C or SIGTERM.\n");
  std::fflush(stdout);
}

}  // namespace

namespace serve_internal {

int ExitCodeFor(const Status& status) {
  return status.code() == StatusCode::kInvalidArgument ? kExitConfigError : kExitStartFailure;
}

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "kvtier";
  return name;
}

int WaitForShutdownSignal() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  int received = 0;
  sigwait(&signals, &received);
  return received;
}

}  // namespace serve_internal

void BlockShutdownSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);  // reloads (ServeCluster); ignored by the other roles
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
}

namespace {

// What Serve checks and sets up before any service starts: the credentials, the data
// directory (and a first token in it), the process metrics. kInvalidArgument for bad
// configuration; anything else is a failure to start (ExitCodeFor).
Result<ResolvedAuth> PrepareToServe(Role role, const KvtierConfig& config, bool cuda_compiled,
                                    MetricsRegistry& registry) {
  KVTIER_ASSIGN_OR_RETURN(ResolvedAuth auth, ResolveAuth(role, config));
  std::error_code ec;
  std::filesystem::create_directories(config.data_dir, ec);
  if (ec)
    return UnavailableError("data_dir " + config.data_dir + ": cannot create: " + ec.message());
  if (auth.generate_token) {
    if (Status s = GenerateLocalToken(config, auth); !s.ok()) return UnavailableError(s.message());
  }
  if (Status s = RegisterProcessMetrics(registry, cuda_compiled, role); !s.ok()) {
    return UnavailableError("metrics: " + s.ToString());
  }
  return auth;
}

// Blocks until SIGINT or SIGTERM (returned); on each SIGHUP calls `on_reload`.
int WaitForShutdownOrReload(const std::function<void()>& on_reload) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  for (;;) {
    int received = 0;
    sigwait(&signals, &received);
    if (received != SIGHUP) return received;
    on_reload();
  }
}

// SIGHUP: the configuration's engines, applied to the running coordinator. A configuration
// that does not load changes nothing.
void ReloadEngines(const std::function<Result<KvtierConfig>()>& reload,
                   const auth::TokenStore& tokens, EmbeddedCluster& node) {
  if (!reload) return;
  Result<KvtierConfig> config = reload();
  if (!config.ok()) {
    spdlog::error("SIGHUP: the configuration does not load, nothing changed: {}",
                  config.status().message());
    return;
  }
  Result<std::vector<coordinator::EngineSource>> engines =
      coordinator::ResolveEngineSources(config->coordinator.engines, tokens);
  Status applied =
      engines.ok() ? node.ReconfigureEngines(std::move(engines).value()) : engines.status();
  if (!applied.ok()) {
    spdlog::error("SIGHUP: coordinator.engines not applied: {}", applied.message());
    return;
  }
  spdlog::info("SIGHUP: following {} engine(s) now; other settings take a restart",
               config->coordinator.engines.size());
}

// `kvtier coordinator` and `kvtier up`: the embedded cluster (with the local worker and
// store for `up`) and the metrics endpoint, ready until SIGINT or SIGTERM.
int ServeCluster(Role role, const KvtierConfig& config, ResolvedAuth auth,
                 MetricsRegistry& registry, int gpu,
                 const std::function<Result<KvtierConfig>()>& reload) {
  const auth::TokenStore tokens = auth.tokens;  // shares the entries (and their reloads)
  EmbeddedClusterOptions cluster;
  cluster.config = config;
  cluster.tokens = std::move(auth.tokens);
  cluster.registry = &registry;
  cluster.node_id = HostName();
  cluster.local_node = role == Role::kUp;
  cluster.gpu = gpu;
  Result<std::unique_ptr<EmbeddedCluster>> node = EmbeddedCluster::Create(std::move(cluster));
  if (!node.ok()) {
    spdlog::error("{}", node.status().message());
    return ExitCodeFor(node.status());
  }
  std::atomic<bool> ready{false};
  MetricsHttpServerOptions http_options;
  http_options.bind_address = config.metrics.bind;
  http_options.port = config.metrics.port;
  http_options.registry = &registry;
  http_options.tls_cert_file = config.tls.cert_file;  // a TLS node leaves no plaintext listener
  http_options.tls_key_file = config.tls.key_file;
  http_options.readiness = [&ready, cluster = node->get()]() -> Status {
    return ready ? cluster->Readiness() : UnavailableError("starting up");
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
  ready = true;

  PrintBanner(role, config, **node, **http, auth.summary);
  if (!config.auth.enabled) spdlog::warn("AUTHENTICATION IS OFF: {}", auth.summary);
  const int signal_number = WaitForShutdownOrReload([&] { ReloadEngines(reload, tokens, **node); });
  spdlog::info("received {}, shutting down", signal_number == SIGINT ? "SIGINT" : "SIGTERM");
  ready = false;
  (*http)->Shutdown();
  (*node)->Shutdown();
  spdlog::info("stopped cleanly");
  return 0;
}

}  // namespace

int Serve(Role role, const KvtierConfig& config,
          const std::function<Result<KvtierConfig>()>& reload) {
  const gpu::DeviceProbe devices = gpu::ProbeDevices();
  gpu::LogDeviceSelection(devices);
  // Everything that can be refused is checked before anything is created.
  MetricsRegistry registry;
  Result<ResolvedAuth> auth = PrepareToServe(role, config, devices.cuda_compiled, registry);
  if (!auth.ok()) {
    spdlog::error("{}", auth.status().message());
    return ExitCodeFor(auth.status());
  }
  // Shares the store's entries with the copy the node gets: a reload is seen by its sessions.
  std::unique_ptr<auth::TokenFileWatcher> watcher;
  if (!auth->tokens.path().empty() && config.auth.reload_interval_ms > 0) {
    Result<std::unique_ptr<auth::TokenFileWatcher>> made = auth::TokenFileWatcher::Create(
        {.tokens = auth->tokens,
         .interval = std::chrono::milliseconds(config.auth.reload_interval_ms)});
    if (!made.ok()) {
      spdlog::error("auth.token_file: {}", made.status().message());
      return ExitCodeFor(made.status());
    }
    watcher = std::move(made).value();
  }
  const int gpu =
      devices.has_gpu() ? devices.devices[0].index : -1;  // the pool goes where the device is
  if (role == Role::kStore)
    return serve_internal::ServeStore(config, std::move(auth->tokens), auth->summary, registry);
  if (role == Role::kWorker) {
    return serve_internal::ServeWorker(config, std::move(auth->tokens), auth->summary, registry,
                                       gpu);
  }
  return ServeCluster(role, config, std::move(*auth), registry, gpu, reload);
}

}  // namespace kvtier::cli
