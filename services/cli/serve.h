// The long-running roles of the kvtier binary: `up` (every role in one process) and
// `coordinator`. Each starts its servers, prints its endpoints, blocks until SIGINT or
// SIGTERM, shuts down in order and returns the process exit code. On SIGHUP `up` and
// `coordinator` load their configuration again (`reload`) and apply coordinator.engines
// (engines added, removed or changed); other settings take a restart.
//
// Exit codes: 0 after a clean shutdown; 1 when a server cannot start (address in use,
// unwritable data directory); configuration errors are reported before this is called.
//
// REQUIRES: SIGINT, SIGTERM and SIGHUP are blocked in every thread (BlockShutdownSignals() called
// on the main thread before any other thread starts).
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/config.h"
#include "common/metrics.h"
#include "services/auth/token_store.h"

namespace kvtier::cli {

enum class Role { kUp, kCoordinator, kStore, kWorker };

void BlockShutdownSignals();

// Returns the exit code. `reload` loads the configuration from its sources again.
int Serve(Role role, const KvtierConfig& config,
          const std::function<Result<KvtierConfig>()>& reload = {});

// Shared by the roles (serve.cc, serve_store.cc).
namespace serve_internal {
std::string HostName();
// Blocks until SIGINT or SIGTERM; returns which.
int WaitForShutdownSignal();
// 2 for a configuration error (kInvalidArgument), 1 for anything else.
int ExitCodeFor(const Status& status);
// `kvtier store` after the common checks: serves until a signal, then drains. `tokens`:
// the tenants it serves. Returns the exit code.
int ServeStore(const KvtierConfig& config, auth::TokenStore tokens, const std::string& auth_summary,
               MetricsRegistry& registry);
// `kvtier worker` likewise, its pool on GPU `gpu` (-1: host shared memory).
int ServeWorker(const KvtierConfig& config, auth::TokenStore tokens,
                const std::string& auth_summary, MetricsRegistry& registry, int gpu);
// The node's token at the coordinator (node.coordinator_token_file; empty without one).
Result<std::string> CoordinatorToken(const KvtierConfig& config);

// A running node process (serve_node.cc): its metrics endpoint (ready = `registered`),
// its banner, and `drain` on SIGINT/SIGTERM. Returns the exit code.
struct NodeProcess {
  std::string role;                                         // "store", "worker"
  std::string rpc;                                          // its endpoint
  std::vector<std::pair<std::string, std::string>> banner;  // more lines: label, value
  std::function<bool()> registered;
  std::function<Status()> listening;  // Ok while its listeners accept connections
  std::function<Status()> drain;
};
int RunNodeProcess(const KvtierConfig& config, MetricsRegistry& registry, const NodeProcess& node);
}  // namespace serve_internal

}  // namespace kvtier::cli
