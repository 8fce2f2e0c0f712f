// EmbeddedCluster: a coordinator with, optionally, a worker and a store in this process:
// what `kvtier up` serves, and what `kvtier replay` starts when it is given no cluster to
// connect to.
//
// Create() starts the coordinator's RPC server on config.coordinator.listen (port 0 picks
// one; endpoints() says which) with `tokens`, and, with `local_node`, the LocalNode
// (services/cli/local_node.h) embedded in it: a worker pool sized from config.worker on
// GPU `gpu` (-1: host shared memory) and host and disk tiers from config.store under
// config.data_dir. Metrics go to `registry`, which outlives the cluster.
//
// Thread safety: Create, endpoints and Shutdown from one controlling thread; the servers
// run on their own threads.
// Ownership: owns its nodes; Shutdown (or destruction) stops the server before the node.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/metrics.h"
#include "services/auth/token_store.h"
#include "services/coordinator/engines/engine_feed.h"

namespace kvtier::coordinator {
class CoordinatorNode;
}

namespace kvtier::cli {

class LocalNode;

struct EmbeddedClusterOptions {
  KvtierConfig config;
  auth::TokenStore tokens = auth::TokenStore::Disabled();
  MetricsRegistry* registry = nullptr;  // required
  std::string node_id =
      "kvtier";            // the coordinator's id; the local nodes are "<id>/worker", "<id>/store"
  bool local_node = true;  // false: the coordinator alone
  int gpu = -1;
  std::chrono::milliseconds event_tick{100};  // how often the local nodes publish their events
};

class EmbeddedCluster {
 public:
  // The configuration's errors as kInvalidArgument; kUnavailable when a listener cannot
  // bind or the data directory cannot be written.
  [[nodiscard]] static Result<std::unique_ptr<EmbeddedCluster>> Create(
      EmbeddedClusterOptions options);
  ~EmbeddedCluster();

  const std::vector<std::string>& endpoints() const;
  // The routing API's addresses (coordinator.http_listen); empty when it is off.
  const std::vector<std::string>& http_endpoints() const;
  // Follows `engines` from now on (CoordinatorNode::ReconfigureEngines).
  [[nodiscard]] Status ReconfigureEngines(std::vector<coordinator::EngineSource> engines);
  // Ok while the listener every role shares accepts connections.
  [[nodiscard]] Status Readiness() const;
  bool tls() const;
  const LocalNode* local() const { return local_.get(); }  // null without local_node
  void Shutdown();

 private:
  EmbeddedCluster() = default;
  std::unique_ptr<LocalNode> local_;
  std::unique_ptr<coordinator::CoordinatorNode> coordinator_;  // embeds local_: goes first
};

}  // namespace kvtier::cli
