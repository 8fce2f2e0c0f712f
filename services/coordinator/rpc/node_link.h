// NodeLink: a node's calls to the coordinator over the network: register, heartbeat, its
// sequenced events, a snapshot of its holdings, and leave. What a `kvtier store` or
// `kvtier worker` process uses where `kvtier up` calls the coordinator in-process. The
// node's events and holdings travel as the plain types below; Cap'n Proto stays inside.
// With NodeAgent (node_agent.h) it is the coordinator's client library,
// kvtier::coordinator_client: it needs the RPC plumbing and common/ only, never the
// coordinator's index, cluster or server, so the nodes that link it do not either.
//
// Thread safety: every method from any thread (the RpcClient's loop runs the calls).
// Ownership: owns its connection.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/block_key.h"
#include "common/block_vocabulary.h"
#include "common/kv_layout.h"
#include "common/status.h"
#include "services/rpc/rpc_client.h"

namespace kvtier::coordinator {

// One change of what the node holds, as the coordinator's event stream carries it.
struct NodeEvent {
  enum class Kind : uint8_t { kStored, kRemoved, kTierChanged };
  Kind kind = Kind::kStored;
  BlockKey key;
  bool first = false;          // kStored: the chain's first block (no parent)
  BlockKey parent;             // kStored
  Tier tier = Tier::kGpu;      // where (kTierChanged: from)
  Tier to_tier = Tier::kHost;  // kTierChanged
  uint32_t pool = 0;
  uint8_t priority = kDefaultPriority;  // kStored
  uint64_t retention_ms = 0;            // kStored: until the priority reverts; 0: for good
  uint64_t salt_scope = 0;              // kStored
  std::vector<uint32_t> tokens =
      {};  // kStored: the block's tokens, for partial matching (optional)
};

// One block of a snapshot.
struct NodeBlock {
  BlockKey key;
  bool first = false;
  BlockKey parent;
  Tier tier = Tier::kGpu;
  uint32_t pool = 0;
  uint8_t priority = kDefaultPriority;
  uint64_t retention_ms = 0;
  uint64_t salt_scope = 0;
  std::vector<uint32_t> tokens = {};  // optional, for partial matching
};

// One pool of the node, as it registers (a store's tiers: pool 0 of each, no layout).
struct NodePool {
  Tier tier = Tier::kGpu;
  uint32_t pool = 0;
  uint64_t capacity_blocks = 0;
  uint64_t capacity_bytes = 0;
  std::optional<KvLayout> layout =
      std::nullopt;  // a worker pool's: it carries the attention window
};

struct NodeLinkOptions {
  rpc::RpcClientOptions connection;  // the coordinator's address and this node's token
  std::string node_id;               // stable across restarts (the pod name)
  NodeRole role = NodeRole::kStore;
  std::string rpc_address;   // where peers reach this node
  uint64_t incarnation = 0;  // new on every process start
  uint32_t snapshot_chunk_blocks = 8192;
  std::vector<NodePool> pools;
};

struct LinkRegistration {
  uint64_t lease_id = 0;
  std::chrono::milliseconds ttl{0};
  bool snapshot_required = false;
};

enum class EventVerdict { kApplied, kDuplicate, kSnapshotRequired };

// Whether `next` travels in the wire event of the run that `last` ends, so that a chain a
// node commits costs the coordinator one event, not one a block: a stored block that
// continues `last` (its parent) with the same tier, pool, priority, retention, scope and
// token count; a removal of the same tier and pool; a tier change between the same
// tiers. Applied in order, a run changes the index as its events one by one would.
[[nodiscard]] bool JoinsWireEvent(const NodeEvent& last, const NodeEvent& next);
// The wire events a Publish of `events` sends: the sequence numbers it spends.
[[nodiscard]] size_t WireEventCount(std::span<const NodeEvent> events);

class NodeLink {
 public:
  // kUnavailable when the coordinator does not answer; kUnauthenticated for a bad token.
  [[nodiscard]] static Result<std::unique_ptr<NodeLink>> Connect(NodeLinkOptions options);
  ~NodeLink();

  [[nodiscard]] Result<LinkRegistration> Register();
  // `active_blocks`: KV blocks of running requests (a worker's load, for routing).
  // kNotFound: the lease is gone (register again).
  [[nodiscard]] Status Heartbeat(uint64_t lease_id, uint64_t active_blocks = 0);
  // `events` in order, each run that JoinsWireEvent as one event: the wire events are
  // numbered first_sequence, first_sequence + 1, ..., WireEventCount(events) of them.
  [[nodiscard]] Result<EventVerdict> Publish(uint64_t first_sequence,
                                             std::span<const NodeEvent> events);
  // Everything the node holds, as of event `next_sequence`, in chunks.
  [[nodiscard]] Status PublishSnapshot(uint64_t next_sequence, std::span<const NodeBlock> blocks);
  [[nodiscard]] Status Leave(uint64_t lease_id);

  class Impl;

 private:
  explicit NodeLink(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::coordinator
