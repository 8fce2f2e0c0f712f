// CoordinatorLink: a storage node's calls to the coordinator over the network: register,
// heartbeat, its sequenced events, a snapshot of its holdings, and leave. The plain types
// of the node (storage::StoreEvent, its holdings) go in; Cap'n Proto stays inside.
//
// Thread safety: every method from any thread (the RpcClient's loop runs the calls).
// Ownership: owns its connection.
#pragma once

#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "common/status.h"
#include "services/rpc/rpc_client.h"
#include "storage/tiered_store.h"

namespace kvtier::store {

struct CoordinatorLinkOptions {
  rpc::RpcClientOptions connection;  // the coordinator's address and this node's token
  std::string node_id;               // stable across restarts (the pod name)
  std::string rpc_address;           // where peers reach this node's BlockStore
  uint64_t incarnation = 0;          // new on every process start
  uint32_t snapshot_chunk_blocks = 8192;
};

struct LinkRegistration {
  uint64_t lease_id = 0;
  std::chrono::milliseconds ttl{0};
  bool snapshot_required = false;
};

enum class EventVerdict { kApplied, kDuplicate, kSnapshotRequired };

class CoordinatorLink {
 public:
  // kUnavailable when the coordinator does not answer; kUnauthenticated for a bad token.
  [[nodiscard]] static Result<std::unique_ptr<CoordinatorLink>> Connect(CoordinatorLinkOptions options);
  ~CoordinatorLink();

  [[nodiscard]] Result<LinkRegistration> Register();
  // kNotFound: the lease is gone (register again).
  [[nodiscard]] Status Heartbeat(uint64_t lease_id);
  // Events numbered first_sequence, first_sequence + 1, ... in order.
  [[nodiscard]] Result<EventVerdict> Publish(uint64_t first_sequence, std::span<const storage::StoreEvent> events);
  // Everything the node holds, as of event `next_sequence`, in chunks.
  [[nodiscard]] Status PublishSnapshot(uint64_t next_sequence,
                                       std::span<const std::pair<storage::TierKind, storage::BlockHeader>> holdings);
  [[nodiscard]] Status Leave(uint64_t lease_id);

  class Impl;

 private:
  explicit CoordinatorLink(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::store
