// Coordinator: the cluster's index kept true by the nodes' sequenced events.
//
// Plain C++ over BlockIndex (what is cached where) and Membership (who is alive, and the
// order of each node's event stream). Nodes register, heartbeat, and publish batches of
// KV events (stored, removed, tier changed, cleared) numbered per node; a gap, a chain
// that disagrees with the index or a restart makes the coordinator ask the node for a
// snapshot, which replaces
// everything the index holds for it. When a lease expires, the node's locations leave the
// index at the next Tick(). The index is soft state: after a coordinator restart it is
// empty (lookups miss, never name a wrong location) until the nodes re-register and send
// their snapshots.
//
// Thread safety: none; one thread (the coordinator's event loop) owns it.
// Ownership: owns its index and membership; the clock outlives it.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/kv_layout.h"
#include "services/coordinator/cluster/membership.h"
#include "services/coordinator/cluster/routed_load.h"
#include "services/coordinator/cluster/refused_keys.h"
#include "services/coordinator/index/block_index.h"
#include "services/coordinator/index/routing.h"

namespace kvtier::coordinator {

struct KvEvent {
  enum class Kind { kStored, kRemoved, kTierChanged, kCleared };
  Kind kind = Kind::kStored;
  ScopeId scope = 0;               // stored
  std::optional<BlockKey> parent;  // stored
  std::vector<BlockKey> keys;      // stored, removed, tier changed (chain order)
  Tier tier = Tier::kGpu;          // stored, removed; the source of a tier change
  uint16_t pool = 0;
  Tier to_tier = Tier::kHost;  // tier changed
  uint16_t to_pool = 0;
  std::vector<BlockRetention> retention;  // stored: one per key, or empty
  std::vector<uint32_t> tokens = {};      // stored: the blocks' tokens (same count each), or empty
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
  std::vector<uint32_t> tokens = {};  // optional: for partial matching
};

struct NodeSnapshot {
  std::string node;
  uint64_t incarnation = 0;
  uint64_t next_sequence = 0;  // the first event number not reflected in the snapshot
  std::vector<SnapshotBlock> blocks;
};

// One pool of a registering node: its tier, id, size and attention window. A worker
// lists its GPU (or host) pools, a store its host and disk tiers (pool 0).
struct PoolInfo {
  Tier tier = Tier::kGpu;
  uint16_t pool = 0;
  uint64_t capacity_blocks = 0;
  uint64_t capacity_bytes = 0;
  PoolWindow window = {};  // in blocks; {0, 0}: full attention
};

// A pool's window in blocks: a block is in a window while any of its tokens is, so
// W = ceil(attention_window / tokens_per_block), and the sinks are the blocks holding a
// sink token. Full attention: {0, 0}.
// Rounded up in 64 bits: a window of nearly 2^32 tokens wrapped to a few blocks in 32.
inline PoolWindow WindowOf(const KvLayout& layout) {
  const uint64_t tpb = layout.tokens_per_block();
  return {static_cast<uint32_t>((uint64_t{layout.attention_window()} + tpb - 1) / tpb),
          static_cast<uint32_t>((uint64_t{layout.sink_tokens()} + tpb - 1) / tpb)};
}

struct CoordinatorOptions {
  BlockIndexOptions index;
  MembershipOptions membership;
  double overlap_weight = 1.0;  // routing: prefill blocks against active blocks
  // Engines' load when the caller gives none: what this coordinator routed to each, halving
  // every this long (routed_load.h). 0: engines count as idle.
  Nanos routed_load_half_life = std::chrono::seconds(5);
  // How many keys of chains a full index left out are remembered (over all nodes, about
  // 80 bytes each), so that their children are left out too instead of asking for a
  // snapshot (refused_keys.h).
  size_t max_refused_keys = 262144;
  // A stored event whose parent no node holds waits this long for some node's event to
  // bring the parent (another node's stream may be behind: waiting_children.h), for at
  // most max_waiting_blocks blocks in all; then it is left out as an orphan. 0: left out
  // at once.
  Nanos orphan_wait = std::chrono::seconds(2);
  size_t max_waiting_blocks = 16384;
};

// A prompt to route: its full blocks' keys, the tokens after them (partial matching), and
// the workers it may go to (names; empty: any live worker).
struct RouteQuery {
  std::span<const BlockKey> keys = {};
  std::span<const uint32_t> tail_tokens = {};
  std::span<const std::string> candidates = {};
  // The caller's view of each candidate's load, in active blocks (candidate_active_blocks[i]
  // is candidates[i]'s), in place of the coordinator's: a gateway knows what it has sent each
  // engine, which engines do not report. Empty: the heartbeats' (0 for engines).
  std::span<const uint64_t> candidate_active_blocks = {};
};

struct CoordinatorStats {
  BlockIndexStats index;
  MembershipStats membership;
  // Over live nodes, by tier: the blocks their pools hold at most (as registered) and the
  // blocks the index has them hold.
  std::array<uint64_t, kTierCount> capacity_blocks{};
  std::array<uint64_t, kTierCount> capacity_bytes{};
  std::array<uint64_t, kTierCount> held_blocks{};
  // Stored events and snapshot blocks left out because their parent had been left out of
  // a full index (index.refused_full counts those the index itself refused).
  uint64_t refused_children = 0;
  // Stored blocks (events and snapshots) left out because no node held their parent when
  // they arrived, nor brought it within orphan_wait: no lookup could reach them. Not
  // those their node removed (or stored again) meanwhile: nothing of them was lost.
  uint64_t orphaned_blocks = 0;
  // Stored blocks that waited for their parent and were indexed once it came, and those
  // waiting now.
  uint64_t adopted_blocks = 0;
  uint64_t waiting_blocks = 0;
};

// A node registering.
struct Registration {
  std::string node;
  NodeRole role = NodeRole::kWorker;
  uint64_t incarnation = 0;
  // Its pools with their capacity and window (windowed pools evict and serve as
  // block_index.h says).
  std::vector<PoolInfo> pools = {};
  ConnectionId connection = kNoConnection;  // what it came on, where the caller tracks that
};

class WaitingChildren;

class Coordinator {
 public:
  [[nodiscard]] static Result<std::unique_ptr<Coordinator>> Create(
      const CoordinatorOptions& options);
  ~Coordinator();

  // kInvalidArgument: an unknown tier, a pool listed twice, more sinks than the window;
  // kAlreadyExists: the name is held by another live node (membership.h); nothing changes
  // then. A node whose windows change while the index holds its blocks loses them and is
  // asked for a snapshot.
  [[nodiscard]] Result<RegisterResult> Register(const Registration& registration);
  // The RPC connection closed: see Membership::Disconnected.
  void Disconnected(ConnectionId connection) { membership_.Disconnected(connection); }
  // Renews the lease and records the node's load (active KV blocks) for routing.
  [[nodiscard]] Status Heartbeat(const std::string& node, uint64_t lease_id,
                                 uint64_t active_blocks);
  // The node leaves the cluster now: its locations leave lookups at once (a draining
  // store), instead of after its lease. kNotFound: unknown node or another lease.
  [[nodiscard]] Status Leave(const std::string& node, uint64_t lease_id);

  // kInvalidArgument for a malformed batch (bad tier, priority above 100, retention of the
  // wrong length, tokens not a whole number per block, repeated key): nothing of it is
  // applied. kNotFound: not registered or
  // lease expired; kFailedPrecondition: stale incarnation. A stored event the index has
  // no room for (BlockIndexOptions::max_blocks) is left out, counted, and the stream
  // goes on: lookups miss those blocks. So is a later stored event whose parent was
  // left out (RefusedKeys). A stored event whose parent a later event of the batch
  // stores is applied after that one (parent_lookahead.h); one whose parent no node
  // holds waits up to orphan_wait for a later event of any node that stores it
  // (waiting_children.h: two nodes' streams may bring a chain child first), and is
  // then left out and counted (orphaned_blocks), as a snapshot would leave it out.
  [[nodiscard]] Result<EventAck> PublishEvents(const EventBatch& batch);
  [[nodiscard]] Status PublishSnapshot(const NodeSnapshot& snapshot);

  // `tail_tokens`: the prompt's tokens after its full blocks, for partial matching
  // (BlockIndex::Lookup).
  [[nodiscard]] LookupResult Lookup(ScopeId scope, std::span<const BlockKey> keys,
                                    std::span<const uint32_t> tail_tokens = {});
  // The live worker or engine (not store), among `query.candidates` where given, with the
  // lowest routing cost (ChooseWorker); candidates that are neither are passed over.
  // kUnavailable when no worker is left.
  [[nodiscard]] Result<RouteChoice> Route(ScopeId scope, const RouteQuery& query);
  // Every candidate Route weighs, cheapest first (Route's choice is the first). Unlike
  // Route it records nothing: the caller that acts on one calls RecordRoute.
  [[nodiscard]] Result<std::vector<RouteChoice>> RouteAll(ScopeId scope, const RouteQuery& query);
  // `query`'s prompt went to `chosen`: an engine's routed load grows by its blocks, unless
  // the query carried the candidates' loads (RoutedLoad).
  void RecordRoute(const RouteQuery& query, NodeId chosen);

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
  // The live workers and engines among the query's candidates (all where it names none).
  Result<std::vector<WorkerLoad>> RoutableWorkers(const RouteQuery& query) const;
  Status StoreChain(NodeId node, const StoreRequest& request);
  // StoreChain, then the waiting events whose parent it stored (and theirs, in turn).
  Status StoreChainAndAdopt(NodeId node, const StoreRequest& request);
  // A stored event whose parent no node holds: it waits (the blocks given up counted).
  void Park(NodeId node, const KvEvent& event);
  // PublishEvents' stored events waiting for the later event that stores their parent.
  using Waiting = std::unordered_map<size_t, std::vector<size_t>>;
  // `event` moves from after `from` to after `to`, and those waiting for it with it: each
  // that an event in (from, to] supersedes stays out (an orphan only where
  // LeavesBlocksUnindexed says so), and those waiting for it are parked.
  void KeepWaitersValid(NodeId node, std::span<const KvEvent> events, Waiting& waiting,
                        size_t event, size_t from, size_t to);
  // The events waiting for `event`, which stays out, and theirs in turn: parked, for
  // another store of their parent, of this batch or any node's (any later event of
  // theirs in their place drops them, as for every parked event).
  void ParkWaiters(NodeId node, std::span<const KvEvent> events, Waiting& waiting, size_t event);
  // Everything the index holds for the node goes.
  void DropNode(NodeId node);

  CoordinatorOptions options_;
  std::unique_ptr<BlockIndex> index_;
  Membership membership_;
  RefusedKeys refused_;
  std::unique_ptr<WaitingChildren> waiting_;
  uint64_t refused_children_ = 0;
  uint64_t orphaned_blocks_ = 0;
  uint64_t adopted_blocks_ = 0;
  std::vector<uint64_t> active_blocks_;  // by NodeId, from heartbeats
  RoutedLoad routed_;                    // engines', from this coordinator's routes
  struct NodeCapacity {
    std::array<uint64_t, kTierCount> blocks{};
    std::array<uint64_t, kTierCount> bytes{};
  };
  std::vector<NodeCapacity> capacity_;  // by NodeId, from registration
};

}  // namespace kvtier::coordinator
