// NodeConnections: a worker node's RPC connections to the other nodes of its cluster, by
// node id.
//
// Node ids go to the coordinator (resolveNodes) for the address each is reached at;
// answers are kept for `resolve_ttl`, so a node that moved is found again within it.
// Connections are opened with the node credential and kept for reuse while they stay
// connected (one the peer closed is opened again on its next use). A caller that sees
// a connection fail (kUnavailable) calls Forget: the connection is dropped, and with it
// every address resolved to it, so the next call reconnects and resolves afresh. The
// coordinator is the only source of addresses: callers name nodes, never addresses, so
// the node credential only ever goes to registered nodes.
//
// Shared by the worker's peer fetches (services/worker/rpc/peers/peer_fetcher.h) and its writes
// through to a storage node (services/worker/rpc/peers/remote_store_writer.h).
//
// Thread safety: every method is safe from any thread; connecting and resolving block the
// calling thread only (never call them on an event loop that must not wait).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/tls_context.h"
#include "services/rpc/rpc_client.h"

namespace kvtier::worker {

struct NodeConnectionsOptions {
  std::string coordinator_address;          // required
  std::string token = {};                   // the node credential
  std::string tls_ca_file = {};             // set: TLS to the coordinator and the nodes
  std::chrono::milliseconds timeout{2000};  // per call, connecting included
  std::chrono::milliseconds resolve_ttl{5000};
  uint64_t max_message_bytes = 64ull << 20;
};

class NodeConnections {
 public:
  // kInvalidArgument: no coordinator address, or a CA file that cannot be used.
  [[nodiscard]] static Result<std::unique_ptr<NodeConnections>> Create(
      NodeConnectionsOptions options);
  NodeConnections(const NodeConnections&) = delete;
  NodeConnections& operator=(const NodeConnections&) = delete;

  // Where `node_id` is reached, from the coordinator (cached). kNotFound when the node is
  // not live; kUnavailable (or the coordinator's code) when the coordinator did not answer.
  [[nodiscard]] Result<std::string> Resolve(const std::string& node_id);
  // The kept connection to `address`, opened now when there is none.
  [[nodiscard]] Result<std::shared_ptr<rpc::RpcClient>> Connect(const std::string& address);
  // Drops the connection to `address` and the resolutions that named it.
  void Forget(const std::string& address);

  const NodeConnectionsOptions& options() const { return options_; }
  // The TLS client context for the nodes' data streams (the CA of tls_ca_file); null
  // without TLS.
  const TlsContextPtr& stream_tls() const { return stream_tls_; }

 private:
  struct Resolved {
    std::string address;  // empty: not a live node
    std::chrono::steady_clock::time_point expires;
  };

  NodeConnections(NodeConnectionsOptions options, TlsContextPtr stream_tls)
      : options_(std::move(options)), stream_tls_(std::move(stream_tls)) {}
  Result<std::string> AskCoordinator(const std::string& node_id);

  const NodeConnectionsOptions options_;
  const TlsContextPtr stream_tls_;
  Mutex mu_;  // a leaf: never held across a network call
  std::map<std::string, std::shared_ptr<rpc::RpcClient>> connections_ KVTIER_GUARDED_BY(mu_);
  std::map<std::string, Resolved> resolved_ KVTIER_GUARDED_BY(mu_);
};

}  // namespace kvtier::worker
