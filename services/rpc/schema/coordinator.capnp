# kvtier RPC schema: the coordinator (global prefix index, membership, routing).
# Evolution rules: see common.capnp.
@0xc61ec1f1d61f0683;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("kvtier::rpc::schema");

using Common = import "common.capnp";

enum NodeRole {
  worker @0;
  store @1;
}

struct TierCapacity {
  # One pool of a node (a store's tiers are pool 0 of theirs). The layout, where set,
  # gives the pool's attention window: a windowed pool may drop interior blocks.
  tier @0 :Common.Tier;
  poolId @1 :UInt32;
  capacityBlocks @2 :UInt64;
  usedBlocks @3 :UInt64;
  layout @4 :Common.KvLayout;
  capacityBytes @5 :UInt64;
}

struct NodeInfo {
  nodeId @0 :Text;            # stable across restarts (e.g. the pod name)
  role @1 :NodeRole;
  rpcAddress @2 :Text;        # where peers reach this node's Session
  dataAddress @3 :Text;       # bulk block stream, if separate from RPC; empty otherwise
  incarnation @4 :UInt64;     # new value on every process start: detects restarts
  capacities @5 :List(TierCapacity);
}

struct Lease {
  leaseId @0 :UInt64;
  ttlMs @1 :UInt64;           # renew with heartbeat before it runs out
}

struct StoredEvent {
  # Blocks committed on the node, a chain continuing `parentKey` (absent: the chain starts
  # at the tenant's root).
  hasParent @0 :Bool;
  parentKey @1 :Common.BlockKey;
  keys @2 :List(Common.BlockKey);
  tier @3 :Common.Tier;
  poolId @4 :UInt32;
  tokensPerBlock @5 :UInt32;
  priority @6 :UInt8;
  retentionExpiryMs @7 :UInt64;   # 0: none; else ms after the event until priority reverts
  saltScope @8 :UInt64;           # the tenant's salt scope (common/block_key.h SaltScope)
  tokens @9 :List(UInt32);        # optional: the blocks' tokens, block after block, for
                                  # partial matching (the same count for each block)
}

struct RemovedEvent {
  keys @0 :List(Common.BlockKey);
  tier @1 :Common.Tier;
  poolId @2 :UInt32;
}

struct TierChangedEvent {
  keys @0 :List(Common.BlockKey);
  fromTier @1 :Common.Tier;
  toTier @2 :Common.Tier;
  fromPoolId @3 :UInt32;
  toPoolId @4 :UInt32;
}

struct KvEvent {
  union {
    stored @0 :StoredEvent;
    removed @1 :RemovedEvent;
    tierChanged @2 :TierChangedEvent;
    cleared @3 :Void;          # the node dropped everything it held
  }
}

struct EventBatch {
  nodeId @0 :Text;
  incarnation @1 :UInt64;
  firstSequence @2 :UInt64;   # event i of the batch has sequence firstSequence + i
  events @3 :List(KvEvent);
}

enum EventAckStatus {
  applied @0;
  duplicate @1;          # every event was already applied; nothing changed
  snapshotRequired @2;   # gap, unknown incarnation or restart: send publishSnapshot
}

struct SnapshotBlock {
  key @0 :Common.BlockKey;
  hasParent @1 :Bool;
  parentKey @2 :Common.BlockKey;
  location @3 :Common.Location;
  priority @4 :UInt8;
  retentionExpiryMs @5 :UInt64;
  saltScope @6 :UInt64;
  tokens @7 :List(UInt32);        # optional: the block's tokens, for partial matching
}

struct NodeSnapshot {
  # A node's full holdings. It reflects every event numbered below `nextSequence`; the
  # node's next batch starts there. Large snapshots are sent in chunks (parents before or
  # after children, in any order); `last` marks the final chunk.
  nodeId @0 :Text;
  incarnation @1 :UInt64;
  nextSequence @2 :UInt64;
  blocks @3 :List(SnapshotBlock);
  last @4 :Bool;
}

struct LookupRequest {
  keys @0 :List(Common.BlockKey);       # the prompt's full blocks, in order
  partialTokens @1 :List(UInt32);       # optional: the prompt's tokens after its full
                                        # blocks (its partial last block)
  compactLocations @2 :Bool;
  # true: the answer lists the matched blocks' locations in LookupResult's `nodes`,
  # `locations` and `locationEnds`, and leaves `blocks` empty (the matched blocks' keys
  # are the request's first keys). A coordinator older than this field ignores it and
  # answers `blocks`, so a reader handles both forms. false: `blocks` only.
}

struct CompactLocation {
  # A Location whose node is named by its index in the answer's `nodes`: one word.
  node @0 :UInt16;
  tier @1 :Common.Tier;
  poolId @2 :UInt32;
}

struct MatchedBlock {
  key @0 :Common.BlockKey;
  locations @1 :List(Common.Location);
}

struct NodeScore {
  nodeId @0 :Text;
  prefixBlocks @1 :UInt32;   # longest consecutive prefix this node can serve
  score @2 :Float64;         # prefix weighted by tier (gpu > host > disk), plus the
                             # share of the next block's tokens it can reuse
  partialTokens @3 :UInt32;  # tokens of the block after the prefix this node can reuse
}

struct LookupResult {
  matchedBlocks @0 :UInt32;
  blocks @1 :List(MatchedBlock);
  partialMatchTokens @2 :UInt32;   # tokens of the next block that match (partial reuse)
  scores @3 :List(NodeScore);
  partialBlock @4 :MatchedBlock;   # with partialMatchTokens > 0: the cached block they match
  partialBlockTokens @5 :UInt32;   # the tokens that block holds
  # Compact answers (LookupRequest.compactLocations) only; `partialBlock` and `scores`
  # still name their nodes.
  nodes @6 :List(Text);                    # each node the locations name, once
  locations @7 :List(CompactLocation);     # the matched blocks' locations, block after block
  locationEnds @8 :List(UInt32);           # one per matched block: where its locations end
}

struct RouteRequest {
  keys @0 :List(Common.BlockKey);
  candidates @1 :List(Text);   # restrict to these worker ids; empty: any live worker
  partialTokens @2 :List(UInt32);  # optional: the prompt's tokens after its full blocks; a
                                   # worker that can reuse some of them costs less
}

struct RouteDecision {
  nodeId @0 :Text;
  rpcAddress @1 :Text;
  prefixBlocks @2 :UInt32;
  score @3 :Float64;         # the routing cost: blocks to prefill + active blocks (lower wins)
  partialTokens @4 :UInt32;  # of the request's partialTokens, those the worker can reuse
}

struct CoordinatorStats {
  nodes @0 :UInt32;
  indexBlocks @1 :UInt64;
  indexBytes @2 :UInt64;
  lookups @3 :UInt64;
  sequenceGaps @4 :UInt64;
  resyncs @5 :UInt64;
  leaseExpiries @6 :UInt64;
  clusterCounts @7 :Bool;
  # True for a node session: the counts above cover the cluster. A tenant session sees the
  # node count only (the rest depends on what other tenants cached): false, and zeros.
}

interface Coordinator {
  # register, heartbeat, publishEvents, publishSnapshot and leave need a node session
  # (a node credential: services/auth/token_store.h); a tenant session gets
  # PERMISSION_DENIED. With auth off every session is a node's.

  register @0 (node :NodeInfo) -> (lease :Lease, snapshotRequired :Bool);
  # Joins (or rejoins) the cluster. A new incarnation of a known node drops its old
  # locations and asks for a snapshot. INVALID_ARGUMENT: empty node id or address.

  heartbeat @1 (nodeId :Text, leaseId :UInt64, capacities :List(TierCapacity), activeBlocks :UInt64)
      -> (lease :Lease, snapshotRequired :Bool);
  # Renews the lease and reports load (KV blocks of running requests) for routing.
  # NOT_FOUND: unknown node or expired lease (register again).

  publishEvents @2 (batch :EventBatch) -> (status :EventAckStatus, nextSequence :UInt64);
  # Applies a batch in sequence order. Events already applied are skipped; a gap applies
  # nothing after it and answers snapshotRequired. NOT_FOUND: node not registered.

  publishSnapshot @3 (snapshot :NodeSnapshot) -> ();
  # Replaces everything the index holds for the node (after the last chunk).

  lookup @4 (request :LookupRequest) -> (result :LookupResult);
  # Longest cached prefix under the session's salt, and per-node routing scores. A block
  # stored under another salt never matches and never shows in a score.

  route @5 (request :RouteRequest) -> (decision :RouteDecision);
  # The live worker (among the candidates, where given) with the lowest cost;
  # UNAVAILABLE when none is live.

  stats @6 () -> (stats :CoordinatorStats);
  # A tenant session: the node count only (CoordinatorStats.clusterCounts).

  leave @7 (nodeId :Text, leaseId :UInt64) -> ();
  # The node leaves now (a store draining on SIGTERM): its locations leave lookups at
  # once rather than when its lease runs out. NOT_FOUND: unknown node or another lease.

  resolveNodes @8 (nodeIds :List(Text)) -> (nodes :List(NodeInfo));
  # Where the live nodes among `nodeIds` are reached (nodeId, role, rpcAddress): what a
  # worker asks before fetching blocks that a lookup placed on other nodes. Unknown and
  # expired nodes are left out.
}
