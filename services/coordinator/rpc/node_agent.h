// NodeAgent: keeps one node known to the coordinator, from a thread of its own, so that no
// blocking network call runs on the loop that serves the node's clients.
//
// Every tick it connects if it has no connection (retrying while the coordinator is
// away), registers if it is not registered (answering a snapshot request with
// `holdings()`), renews the lease (with `active_blocks()`, a worker's load), and
// publishes the events queued since, numbered in sequence. A failed call means registering
// again (the coordinator then asks for a snapshot when it lost track); a lost connection
// (the coordinator restarted or moved) means connecting again. Stop() leaves the cluster:
// the node's blocks leave lookups at once.
//
// Thread safety: Enqueue and registered from any thread; Stop from one controlling thread.
// The callbacks run on the agent's thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "services/coordinator/rpc/node_link.h"

namespace kvtier::coordinator {

struct NodeAgentOptions {
  NodeLinkOptions link;
  std::chrono::milliseconds tick{100};
  // Everything the node holds now (a snapshot). Events queued before it was asked for
  // are dropped: it reflects them.
  std::function<Result<std::vector<NodeBlock>>()> holdings;  // required
  std::function<uint64_t()> active_blocks;                   // optional
  std::function<void()> on_tick;                             // optional: metrics and the like
};

class NodeAgent {
 public:
  // Starts the thread; the coordinator need not be up. REQUIRES: options.holdings.
  static std::unique_ptr<NodeAgent> Start(NodeAgentOptions options);
  ~NodeAgent();

  void Enqueue(std::vector<NodeEvent> events);
  // Registered and its snapshot sent: the coordinator's view of the node is current.
  bool registered() const;
  // Stops the thread and leaves the coordinator. Idempotent; the leave's failure is
  // returned (the node has stopped either way).
  [[nodiscard]] Status Stop();

  class Impl;

 private:
  explicit NodeAgent(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::coordinator
