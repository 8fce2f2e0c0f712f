// BlockIndex: the coordinator's memory of which node and tier holds each KV block.
//
// A radix tree over chained block keys (common/block_key.h): every block records its
// parent, so a prompt's keys match as a chain from the root, and the longest cached
// prefix is found with one hash probe per block. For each block the index keeps its
// locations (node, tier, pool), priority (0-100) and retention expiry, hit count and salt
// scope; its last access is its position in each location's LRU list. Per (node, tier) it
// keeps a prioritized LRU: all blocks of the lowest priority go before any block of the
// next, least recently used first. A place is one pool of one tier of one node: a block
// held by two pools of a node has two locations.
//
// Full-attention pools evict leaves first (evicting an interior block would orphan its
// cached descendants). A windowed pool (SetNodeWindows: a window of W blocks, the first S
// of a chain sinks) may also evict an interior block that has left every window: no leaf
// held in that pool lies fewer than W blocks below it, and it is not a sink. Each cached
// sequence (a leaf) needs only its sinks and its last W blocks, so it stays servable:
// Lookup counts a windowed pool as serving a prefix of m blocks when it holds blocks
// [0, S) and [m - W, m), whatever lies between (interior blocks no pool holds stay in the
// tree as ghosts while they have children). A node's windowed pools of one tier are one
// model's layers, a pool per window, each sequence spanning them: its score counts the
// prefix every one of them serves.
//
// Salt scopes: a block is stored under the scope (tenant) of its writer; a lookup under
// another scope never matches it and never counts it in a node's score.
//
// Retention (TensorRT-LLM semantics): a block stored with a priority and a duration keeps
// that priority until the duration has passed since it was stored, then reverts to
// kDefaultPriority. Expiry runs from a min-heap ordered by deadline (AdvanceTime), never
// from a scan of the tree. An expired block keeps its place as most recently used at its
// new priority.
//
// Partial matching: blocks stored with their tokens (StoreRequest::tokens) are compared
// token by token with a prompt's tail after its matched prefix (Lookup's tail_tokens).
//
// Memory: 52 bytes per block plus 4-byte hash slots at load factor <= 0.8; extra
// locations of a block held by several nodes or tiers take 24 bytes each. A windowed
// pool adds a counter (10 bytes in a flat table) per block within a window of a leaf;
// a block stored with tokens, its tokens (4 bytes each) and about 120 bytes. Blocks
// grow in pages of 1024; the key table is sized for expected_blocks and grows by half.
//
// Thread safety: none; one thread owns an index (the coordinator's event-loop thread).
// Ownership: the index owns its storage; the clock outlives it.
//
// REQUIRES: node ids below kMaxNodes; priorities in [0, 100] (checked: kInvalidArgument).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <queue>
#include <span>
#include <vector>

#include "common/block_key.h"
#include "common/block_vocabulary.h"
#include "common/clock.h"
#include "common/status.h"

namespace kvtier::coordinator {

inline constexpr uint32_t kMaxNodes = 4096;

using NodeId = uint16_t;   // dense ids; the membership layer maps node names to them
using ScopeId = uint16_t;  // salt scopes; the session layer maps tenants to them

struct Location {
  NodeId node = 0;
  Tier tier = Tier::kGpu;
  uint16_t pool = 0;
  friend bool operator==(const Location&, const Location&) = default;
};

// The attention window of a pool, in blocks: a block is within the window of a sequence
// ending at block e when e - W < its index <= e (W = ceil(window tokens / tokens per
// block)); the first sink_blocks blocks of a chain are always kept. window_blocks 0: full
// attention (then sink_blocks must be 0).
struct PoolWindow {
  uint32_t window_blocks = 0;
  uint32_t sink_blocks = 0;
  friend bool operator==(const PoolWindow&, const PoolWindow&) = default;
};

struct PoolWindowSpec {
  Location pool = {};  // node, tier and pool id
  PoolWindow window = {};
};

// The checks a node's pool list must pass (nodes are not compared): a known tier, no
// more sinks than the window, no pool (tier and id) listed twice. kInvalidArgument names
// the pool and its entry. What SetNodeWindows checks, for callers that check before the
// node has an id (registration).
[[nodiscard]] Status ValidatePoolWindows(std::span<const PoolWindowSpec> pools);

struct StoreRequest {
  ScopeId scope = 0;
  std::optional<BlockKey> parent = {};  // absent: the chain starts at the scope's root
  std::span<const BlockKey> keys = {};  // in chain order
  Location location = {};
  std::span<const BlockRetention> retention = {};  // one per key, or empty for the default
  // The blocks' tokens, block after block (the same count for each), or empty: kept for
  // partial matching (Lookup with tail tokens) where given.
  std::span<const uint32_t> tokens = {};
};

// The checks of a stored chain of `keys` that need no index state: no key twice, one
// retention entry per key or none, priorities within [0, 100], the same number of tokens
// for each block. kInvalidArgument names what was wrong. What Store checks first, for callers that
// check a whole batch before applying any of it (the coordinator).
[[nodiscard]] Status ValidateStoredBlocks(std::span<const BlockKey> keys,
                                          std::span<const BlockRetention> retention, size_t tokens);

struct NodeScore {
  NodeId node = 0;
  uint32_t prefix_blocks = 0;   // longest consecutive prefix this node can serve
  double score = 0.0;           // that prefix, each block weighted by the node's best tier,
                                // plus the share of the next block's tokens it can reuse
  uint32_t partial_tokens = 0;  // tokens of the block after the prefix this node can reuse
};

// The cached block after the matched prefix that shares the most leading tokens with the
// prompt's tail (partial reuse: an engine copies those tokens' KV instead of computing
// them). tokens 0: none.
struct PartialMatch {
  uint32_t tokens = 0;        // leading tokens shared with the tail
  uint32_t block_tokens = 0;  // tokens of the cached block
  BlockKey key;
  std::vector<Location> locations;
};

struct LookupResult {
  uint32_t matched_blocks = 0;
  // Locations of matched block i: locations[location_begin[i] .. location_begin[i + 1]).
  std::vector<Location> locations;
  std::vector<uint32_t> location_begin;  // matched_blocks + 1 entries
  std::vector<NodeScore> scores;         // nodes with a prefix or partial tokens, best score first
  PartialMatch partial;                  // with tail tokens only

  std::span<const Location> LocationsOf(uint32_t block) const {
    return std::span<const Location>(locations).subspan(
        location_begin[block], location_begin[block + 1] - location_begin[block]);
  }
};

// The most blocks one index can hold: its key table keeps a block's number in 27 bits.
inline constexpr size_t kMaxIndexBlocks = (size_t{1} << 27) - 1;  // 134,217,727

struct BlockIndexOptions {
  std::array<double, kTierCount> tier_weights = {1.0, 0.5, 0.25};  // gpu, host, disk
  const Clock* clock = &SystemClock::Instance();
  size_t expected_blocks = 1 << 16;  // the sum of the nodes' capacities
  // Bounds the index's memory (about 64 bytes a block): Store refuses a chain that would
  // take the index past it. In [1, kMaxIndexBlocks].
  size_t max_blocks = kMaxIndexBlocks;
};

struct BlockIndexStats {
  size_t blocks = 0;  // blocks with at least one location, plus interior ghosts
  size_t locations = 0;
  size_t memory_bytes = 0;  // everything the index allocated
  uint64_t expirations = 0;
  uint64_t refused_full = 0;  // Store calls refused because of max_blocks
  // Locations dropped by Evict (victims not moved to a lower tier) and Remove, by the
  // block's priority then. RemoveNode (a node leaving) is not counted: it is no eviction.
  std::array<uint64_t, kMaxPriority + 1> evictions_by_priority{};
};

class BlockIndex {
 public:
  [[nodiscard]] static Result<std::unique_ptr<BlockIndex>> Create(const BlockIndexOptions& options);
  ~BlockIndex();

  // Adds `location` to each block of the chain, creating blocks as needed; a block
  // already there is refreshed (its retention replaced, its LRU position renewed).
  // kFailedPrecondition: the parent is not indexed (no node holds it);
  // kInvalidArgument: a priority above 100, a retention list of the wrong length, or a
  // key already indexed under another scope or parent, tokens not a whole number per
  // block; kResourceExhausted: the new blocks would take the index past
  // options.max_blocks. Nothing changes on error.
  [[nodiscard]] Status Store(const StoreRequest& request);

  // Drops `location` (node, tier and pool) from each block; blocks left with no location
  // and no children disappear. Keys not held there are skipped. Returns how many were
  // dropped.
  size_t Remove(Location location, std::span<const BlockKey> keys);

  // Moves each block held at `from` to `to` (same node: an offload or an onboard); keys
  // not held at `from` are skipped. Returns how many moved.
  // REQUIRES: from.node == to.node; keys in chain order (ancestors first), as stored
  // events list them.
  size_t ChangeTier(Location from, Location to, std::span<const BlockKey> keys);

  // Declares the windowed pools of `node`, replacing its earlier declaration (pools not
  // listed, or listed with window 0, are full attention). kInvalidArgument: a node out of
  // range, a pool of another node, or what ValidatePoolWindows refuses;
  // kFailedPrecondition: the declaration changes while the node holds blocks (drop them
  // first with RemoveNode: the counts kept for windows would be wrong). Nothing changes on
  // error.
  [[nodiscard]] Status SetNodeWindows(NodeId node, std::span<const PoolWindowSpec> windows);

  // Drops every location of `node` (it left, or restarted).
  size_t RemoveNode(NodeId node);

  // The longest prefix of `keys` cached under `scope`, its locations, and every node's
  // score. A prefix is cached when every block has a location, or when a windowed pool
  // holds its sinks and last W blocks (the blocks between may have none). A node's score
  // is the better of its full-attention prefix (each block at its best tier's weight)
  // and each windowed pool's prefix (blocks times the pool's tier weight). Does not change
  // recency.
  // `tail_tokens`: the prompt's tokens after the blocks of `keys` (its partial last block).
  // When every key matched, the cached children of the last one (stored with tokens)
  // are compared with them: the one sharing the most leading tokens is `partial`, and a
  // node holding the whole prefix and such a child scores the child's weight times the
  // share of its tokens matched (and reports them in partial_tokens).
  [[nodiscard]] LookupResult Lookup(ScopeId scope, std::span<const BlockKey> keys,
                                    std::span<const uint32_t> tail_tokens = {}) const;

  // Marks the prefix of `keys` that `node` holds (in any tier) as used there: hit counts,
  // and LRU positions on that node (ancestors end up more recent than descendants). A
  // windowed pool of the node renews only what a request over the prefix it serves uses:
  // the last W blocks root to leaf, then the sinks (the blocks between stay as old as
  // they were, so they are the first to go).
  void Touch(NodeId node, ScopeId scope, std::span<const BlockKey> keys);

  // Evicts up to `count` blocks from (node, tier) in prioritized-LRU order, leaves first
  // (interior blocks past every window too, in windowed pools), and returns their keys in
  // eviction order (what the node would report as removed).
  std::vector<BlockKey> Evict(NodeId node, Tier tier, size_t count);

  // Evict, but each victim that `admit` accepts (all, when admit is empty) moves to `to`
  // on the same node instead of leaving it: the offload path (GPU -> host -> disk).
  // Returns every victim in eviction order; `demoted` receives those that moved.
  std::vector<BlockKey> Demote(NodeId node, Tier from, Location to, size_t count,
                               const std::function<bool(const BlockKey&)>& admit,
                               std::vector<BlockKey>* demoted);

  // Blocks held on (node, tier).
  size_t Held(NodeId node, Tier tier) const;

  // Reverts the priority of every block whose retention has expired. Cost: O(log n) per
  // expired block; nothing else is visited.
  void AdvanceTime();

  BlockIndexStats Stats() const;

  class Impl;

 private:
  explicit BlockIndex(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::coordinator
