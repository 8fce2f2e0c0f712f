// Coordinator: the cluster's index kept true by the nodes' sequenced events.
//
// Plain C++ over BlockIndex (what is cached where) and Membership (who is alive, and the
// order of each node's event stream). Nodes register, heartbeat, and publish batches of
// KV events (stored, removed, tier changed, cleared) numbered per node; a gap, a lost
// parent or a restart makes the coordinator ask the node for a snapshot, which replaces
// everything the index holds for it. When a lease expires, the node's locations leave the
// index at the next Tick(). The index is soft state: after a coordinator restart it is
// empty (lookups miss, never name a wrong location) until the nodes re-register and send
// their snapshots.
//
// Thread safety: none; one thread (the coordinator's event loop) owns it.
// Ownership: owns its index and membership; the clock outlives it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "services/coordinator/cluster/membership.h"
#include "services/coordinator/index/block_index.h"
#include "services/coordinator/index/routing.h"

namespace kvtier::coordinator {

struct KvEvent {
  enum class Kind { kStored, kRemoved, kTierChanged, kCleared };
  Kind kind = Kind::kStored;
  ScopeId scope = 0;                      // stored
  std::optional<BlockKey> parent;         // stored
  std::vector<BlockKey> keys;             // stored, removed, tier changed (chain order)
  Tier tier = Tier::kGpu;                 // stored, removed; the source of a tier change
  uint16_t pool = 0;
  Tier to_tier = Tier::kHost;             // tier changed
  uint16_t to_pool = 0;
  std::vector<BlockRetention> retention;  // stored: one per key, or empty
};

struct EventBatch {
  std::string node;
  uint64_t incarnation = 0;
  uint64_t first_sequence = 0;
  std::vector<KvEvent> events;
};

struct EventAck {
  BatchVerdict verdict = BatchVerdict::kApply;
  uint64_t next_sequence = 0;
};

struct SnapshotBlock {
  BlockKey key;
  std::optional<BlockKey> parent;
  ScopeId scope = 0;
  Tier tier = Tier::kGpu;
  uint16_t pool = 0;
  BlockRetention retention;
};

struct NodeSnapshot {
  std::string node;
  uint64_t incarnation = 0;
  uint64_t next_sequence = 0;  // the first event number not reflected in the snapshot
  std::vector<SnapshotBlock> blocks;
};

struct CoordinatorOptions {
  BlockIndexOptions index;
  MembershipOptions membership;
  double overlap_weight = 1.0;  // routing: prefill blocks against active blocks
};

struct CoordinatorStats {
  BlockIndexStats index;
  MembershipStats membership;
};

class Coordinator {
 public:
  [[nodiscard]] static Result<std::unique_ptr<Coordinator>> Create(const CoordinatorOptions& options);

  [[nodiscard]] Result<RegisterResult> Register(const std::string& node, NodeRole role, uint64_t incarnation);
  // Renews the lease and records the node's load (active KV blocks) for routing.
  [[nodiscard]] Status Heartbeat(const std::string& node, uint64_t lease_id, uint64_t active_blocks);
  // The node leaves the cluster now: its locations leave lookups at once (a draining
  // store), instead of after its lease. kNotFound: unknown node or another lease.
  [[nodiscard]] Status Leave(const std::string& node, uint64_t lease_id);

  // kInvalidArgument for a malformed batch (bad tier, priority above 100, retention of the
  // wrong length, repeated key): nothing of it is applied. kNotFound: not registered or
  // lease expired; kFailedPrecondition: stale incarnation.
  [[nodiscard]] Result<EventAck> PublishEvents(const EventBatch& batch);
  [[nodiscard]] Status PublishSnapshot(const NodeSnapshot& snapshot);

  [[nodiscard]] LookupResult Lookup(ScopeId scope, std::span<const BlockKey> keys);
  // The live worker (not store) with the lowest routing cost; kUnavailable when none.
  [[nodiscard]] Result<RouteChoice> Route(ScopeId scope, std::span<const BlockKey> keys);

  // Expires leases (dropping those nodes' locations) and retention deadlines. The service
  // calls it at least every half lease period, so a dead node's blocks leave lookups within
  // two lease periods.
  void Tick();
  CoordinatorStats Stats() const;
  const std::string& NodeName(NodeId node) const { return membership_.name(node); }
  // The role of a node whose lease is live; nullopt for an unknown or expired node.
  std::optional<NodeRole> LiveRole(const std::string& node) const;
  Nanos lease_ttl() const { return options_.membership.lease_ttl; }

 private:
  Coordinator(const CoordinatorOptions& options, std::unique_ptr<BlockIndex> index);
  Status Apply(NodeId node, const KvEvent& event);

  CoordinatorOptions options_;
  std::unique_ptr<BlockIndex> index_;
  Membership membership_;
  std::vector<uint64_t> active_blocks_;  // by NodeId, from heartbeats
};

}  // namespace kvtier::coordinator
