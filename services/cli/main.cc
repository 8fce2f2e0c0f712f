// The kvtier command: every role, the benchmarks and the trace replay in one binary.
//
// Exit codes: 0 success; 1 a runtime failure (cannot start, server unreachable, command
// not built in this release); 2 bad usage: an unknown flag, a bad value or a bad
// configuration file. Nothing is started when the exit code is 2.
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "common/listener_health.h"
#include "common/logging.h"
#include "common/malloc_tuning.h"
#include "common/version.h"
#include "services/auth/token_store.h"
#include "services/cli/bench_command.h"
#include "services/cli/config_flags.h"
#include "services/cli/connect_flags.h"
#include "services/cli/replay_command.h"
#include "services/cli/route_command.h"
#include "services/cli/serve.h"
#include "services/cli/status_command.h"
#include "services/rpc/rpc_client.h"

namespace kvtier::cli {
namespace {

constexpr int kExitUsage = 2;

constexpr const char* kUpFooter = R"(Examples:
  kvtier up                                   # local: generated token, data in ./kvtier-data
  kvtier up --metrics-port 9500 --data-dir /var/lib/kvtier
  kvtier up --config kvtier.yaml              # settings from YAML; flags and KVTIER_* override it
  kvtier up --auth-enabled false              # no authentication: trusted machines only

Every setting is a flag here, a KVTIER_* environment variable, or a YAML key.
Check it is alive:  curl http://127.0.0.1:9400/healthz)";

int RunVersion(const ConnectFlags& flags) {
  std::printf("client  kvtier %s (rpc schema %u)\n", kVersion, kSchemaVersion);
  if (flags.connect.empty()) return 0;
  rpc::RpcClientOptions options;
  options.address = flags.connect;
  options.tls_ca_file = flags.tls_ca_file;
  options.tls_server_name = flags.tls_server_name;
  Result<std::string> token = auth::TokenFromFlags(flags.token, flags.token_file);
  if (!token.ok()) {
    std::fprintf(stderr, "kvtier version: --token-file: %s\n", token.status().message().c_str());
    return kExitUsage;
  }
  options.token = *token;
  Result<std::unique_ptr<rpc::RpcClient>> client = rpc::RpcClient::Connect(std::move(options));
  if (!client.ok()) {
    std::fprintf(stderr, "kvtier version: %s: %s\n", flags.connect.c_str(),
                 client.status().ToString().c_str());
    return 1;
  }
  const rpc::ServerVersion& server = (*client)->server();
  std::string roles;
  for (const std::string& r : server.roles) roles += (roles.empty() ? "" : ",") + r;
  std::printf("server  kvtier %s (rpc schema %u) node %s, roles %s, tenant %s\n",
              server.version.c_str(), server.schema_version, server.node_id.c_str(), roles.c_str(),
              (*client)->tenant().c_str());
  return 0;
}

int RunRole(Role role, const char* name, const ConfigFlags& flags) {
  Result<KvtierConfig> config = flags.Load();
  if (!config.ok()) {
    std::fprintf(stderr, "kvtier %s: configuration error: %s\n", name,
                 config.status().message().c_str());
    return kExitUsage;
  }
  InitLogging(*ParseLogLevel(config->log.level));  // validated by the config schema
  return Serve(role, *config, [&flags] { return flags.Load(); });
}

}  // namespace

int Main(int argc, char** argv) {
  KeepLargeAllocationsInTheHeap();
  // Every command logs to stderr, never into what it prints (`kvtier replay --json` is one
  // JSON object); the roles set their configured level once their configuration is read.
  InitLogging(spdlog::level::warn);
  RaiseDescriptorLimit();  // the listeners' default limits are shares of it
  CLI::App app{
      "kvtier: a distributed multi-tier KV-cache for LLM inference engines.\n"
      "Start with `kvtier up`, then see `kvtier up --help`."};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("kvtier ") + kVersion);

  CLI::App* up = app.add_subcommand(
      "up", "Run every role in one process: the embedded default for one machine.");
  ConfigFlags up_flags(*up);
  up->footer(kUpFooter);

  CLI::App* coordinator = app.add_subcommand("coordinator",
                                             "Run the coordinator alone (cluster prefix index, "
                                             "membership, routing). Needs --auth-token-file "
                                             "unless --auth-enabled false.");
  ConfigFlags coordinator_flags(*coordinator);

  CLI::App* worker = app.add_subcommand("worker",
                                        "Run a worker node: the block pool (GPU memory when one "
                                        "answers), its host and disk tiers, served to "
                                        "the node's inference processes and registered with the "
                                        "coordinator at --node-coordinator. Needs "
                                        "--auth-token-file unless --auth-enabled false.");
  ConfigFlags worker_flags(*worker);
  CLI::App* store = app.add_subcommand(
      "store",
      "Run a storage node: host and disk tiers served to every node, registered with the "
      "coordinator at "
      "--node-coordinator. Needs --auth-token-file unless --auth-enabled false.");
  ConfigFlags store_flags(*store);
  BenchCommand bench(app);
  ReplayCommand replay(app);
  StatusCommand status(app);
  RouteCommand route(app);

  ConnectFlags version_flags;
  CLI::App* version =
      app.add_subcommand("version", "Print the version; with --connect, also the server's.");
  version_flags.AddTo(*version, /*connect_required=*/false);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : kExitUsage;
  }

  // Serving roles wait for SIGINT/SIGTERM with sigwait: the signals are blocked before any
  // thread starts (parsing starts none). Every other command keeps the default actions,
  // so Ctrl-C and `timeout` stop a benchmark.
  if (up->parsed() || coordinator->parsed() || store->parsed() || worker->parsed())
    BlockShutdownSignals();
  if (up->parsed()) return RunRole(Role::kUp, "up", up_flags);
  if (coordinator->parsed()) return RunRole(Role::kCoordinator, "coordinator", coordinator_flags);
  if (worker->parsed()) return RunRole(Role::kWorker, "worker", worker_flags);
  if (store->parsed()) return RunRole(Role::kStore, "store", store_flags);
  if (bench.parsed()) return bench.Run();
  if (replay.parsed()) return replay.Run();
  if (status.parsed()) return status.Run();
  if (route.parsed()) return route.Run();
  return RunVersion(version_flags);
}

}  // namespace kvtier::cli

int main(int argc, char** argv) { return kvtier::cli::Main(argc, argv); }
