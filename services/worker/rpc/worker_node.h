// WorkerNode: a worker node as a running server (`kvtier worker`).
//
// It sizes one pool from the configuration (services/worker/worker_plan.h: GPU memory
// shared by CUDA IPC when `gpu` >= 0, host shared memory otherwise), opens the node's host
// and disk tiers for the pool's evictions (services/store/store_tiers.h), and serves the
// Worker capability (the node's inference processes attach, allocate, onboard, commit) and
// the tiers as a BlockStore capability on worker.listen (with the pool's committed blocks
// behind them, for peers onboarding a prefix computed here). An onboard whose request
// names other nodes fetches what this node lacks from them (services/worker/rpc/
// peer_fetcher.h, with the node's credential). Two NodeAgents keep the
// coordinator told, as `kvtier up` does in-process: "<name>/worker" (the pool's blocks,
// with its load for routing) and "<name>/store" (the tiers' blocks).
//
// The Worker is not thread-safe: it stays on the server's event loop, whose tick hands
// its events, load and (when asked) holdings to the agents' threads; no network call to
// the coordinator ever runs on that loop.
//
// Thread safety: Create, endpoints, registered, Summary and Drain from one controlling
// thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/metrics.h"
#include "services/auth/token_store.h"

namespace kvtier::worker {

struct WorkerNodeOptions {
  KvtierConfig config;  // worker.*, store.* (tiers), node.*, data_dir, tls
  auth::TokenStore tokens = auth::TokenStore::Disabled();
  MetricsRegistry* registry = nullptr;  // required; outlives the node
  std::string name;                     // required: the node is "<name>/worker" and "<name>/store"
  std::string coordinator_token;
  int gpu = -1;
  std::chrono::milliseconds tick{100};
};

class WorkerNode {
 public:
  [[nodiscard]] static Result<std::unique_ptr<WorkerNode>> Create(WorkerNodeOptions options);
  ~WorkerNode();

  const std::vector<std::string>& endpoints() const;
  // Ok while its listeners accept connections (rpc_server.h's Readiness()).
  [[nodiscard]] Status Readiness() const;
  // Both the pool and the tiers are registered with the coordinator.
  bool registered() const;
  std::string Summary() const;
  // Leaves the coordinator (the node's blocks leave lookups at once), stops serving and
  // flushes the disk tier. Idempotent.
  [[nodiscard]] Status Drain();

  class Impl;

 private:
  explicit WorkerNode(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::worker
