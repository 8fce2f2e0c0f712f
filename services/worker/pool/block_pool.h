// BlockPool: the bookkeeping of one pool of KV blocks on a worker (one per attention
// window and KV-head count). It decides which block ids hold what; it never touches the
// bytes (the caller moves them with gpu/kernels.h), so it is tested on the CPU.
//
// Blocks are blank (free), in use (referenced by sequences), or cached (committed under
// a block key, unreferenced, reusable until evicted). Sequences share prefix blocks by
// reference count. A new sequence reuses the longest cached chain of its full-block keys
// (in a windowed pool, the longest prefix whose sinks and last window it holds) and, with
// partial reuse on, the first tokens of one more cached block whose tokens
// match: in place when nothing else needs that block, otherwise by copy-on-partial-reuse
// into a new block (the caller copies `copy.tokens` tokens before its next pool call).
//
// Eviction, when a blank block is needed and none is free: prioritized LRU over cached
// blocks (every block of priority p before any of p + 1; least recently released first).
// Full-attention pools evict leaves first (an interior block's cached descendants would
// become unreachable). Windowed pools let a sequence drop the blocks that leave its
// window (sink blocks stay), so those are unreferenced early and an interior block that
// left every window is evicted like any other. An evicted block is to be offloaded when
// its priority is at least secondary_offload_min_priority, dropped otherwise.
//
// Every change to what is cached is recorded as a PoolEvent with a sequence number
// (stored, removed, offloaded), for the worker to publish to the coordinator in order.
//
// Retention: a committed block keeps its priority for its duration, then reverts to the
// default (AdvanceTime, driven by a min-heap).
//
// Thread safety: none; one thread (the worker's pool executor) owns a pool.
// Errors: a refused call changes nothing (no blocks, no events). A full pool is
// kResourceExhausted; unknown sequences kNotFound; double frees kFailedPrecondition.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "common/block_key.h"
#include "common/block_vocabulary.h"
#include "common/clock.h"
#include "common/status.h"

namespace kvtier::worker {

using BlockId = uint32_t;
using SequenceId = uint64_t;
inline constexpr BlockId kNoBlock = UINT32_MAX;  // a table entry dropped from a window

struct BlockPoolOptions {
  uint32_t num_blocks = 0;
  uint32_t tokens_per_block = 0;
  uint32_t window_tokens = 0;  // 0: full attention
  uint32_t sink_tokens = 0;    // windowed pools: tokens at the start that never leave
  uint8_t secondary_offload_min_priority = kDefaultPriority;
  bool partial_reuse = true;
  const Clock* clock = &SystemClock::Instance();
};

struct PoolEvent {
  enum class Kind : uint8_t { kStored, kRemoved, kOffloaded };
  Kind kind;
  uint64_t sequence;  // 1, 2, 3... per pool
  BlockKey key;
  BlockKey parent;  // kStored: the parent key (the salt root for a first block)
  bool first;       // the chain's first block
  BlockId block;
  uint8_t priority;
  uint64_t salt_scope;  // SaltScope of the tenant that committed the block
  Nanos retention{0};   // kStored: how long `priority` holds before reverting; 0: for good
};

// A committed block, as a snapshot lists it.
struct PoolHolding {
  BlockId block;
  BlockKey key;
  BlockKey parent;  // the salt root for a first block
  bool first;       // the chain's first block
  uint8_t priority;
  Nanos retention_left;  // until the priority reverts to the default; 0: no expiry
  uint64_t salt_scope;
  uint64_t format_tag = 0;  // as given at Allocate
  // Holdings only (Find, on the peer-fetch path, copies none): as committed; empty when
  // committed without them or with partial reuse off.
  std::vector<uint32_t> tokens = {};
  uint64_t checksum = 0;  // its payload's XXH3, kept from a reader that held it (0: none yet)
};

// Blocks evicted by a call, in eviction order; the caller copies out those to offload
// before it writes into the returned blocks.
struct EvictedBlock {
  BlockId block;
  BlockKey key;
  BlockKey parent;      // the parent key (the salt root for a first block)
  bool first;           // the chain's first block
  uint64_t format_tag;  // as given at Allocate
  uint64_t salt_scope;
  uint8_t priority;
  bool offload;
};

struct PartialCopy {
  BlockId source;
  BlockId destination;
  uint32_t tokens;
};

struct SequenceRequest {
  SequenceId id = 0;
  BlockKey root;            // RootKey(salt): the first block's parent
  uint64_t salt_scope = 0;  // SaltScope(salt), carried by the blocks' events
  uint64_t format_tag = 0;  // what else changes KV values (model, LoRA); partial reuse matches it
  std::span<const BlockKey> block_keys;  // keys of the prompt's full blocks, in order
  std::span<const uint32_t>
      tokens;               // the prompt; empty: no partial reuse, num_tokens says its length
  uint32_t num_tokens = 0;  // the prompt's length when `tokens` is empty; at least 1
  // 0: a dynamic sequence, which Extend grows block by block. Otherwise a static one
  // (preallocated, as a CUDA graph needs): its table gets the blocks of this many tokens
  // now (at least the prompt's) and never changes after, neither grown nor released
  // where it left a window; Extend past it is kOutOfRange.
  uint32_t reserve_tokens = 0;
  // The reused prefix, in blocks, where the caller chose it (a sequence spanning pools
  // reuses what every one of them serves); nullopt: the longest this pool serves.
  // REQUIRES: ServablePrefixes(root, block_keys)[*reuse_blocks].
  std::optional<uint32_t> reuse_blocks = std::nullopt;
  uint32_t max_partial_tokens = UINT32_MAX;  // a cap on partial reuse (likewise shared)
};

struct SequenceStart {
  std::vector<BlockId> block_table;  // ceil(max(tokens, reserve_tokens) / tokens_per_block)
  uint32_t reused_blocks = 0;        // full blocks found cached
  uint32_t reused_tokens = 0;        // tokens whose KV need not be computed
  std::optional<PartialCopy> copy;   // copy-on-partial-reuse to do now
  std::vector<EvictedBlock> evicted;
};

struct SequenceGrowth {
  std::vector<BlockId> new_blocks;  // appended to the table
  std::vector<BlockId> released;    // windowed: blocks that left the window
  std::vector<EvictedBlock> evicted;
};

struct BlockPoolStats {
  uint32_t total = 0, free = 0, cached = 0, in_use = 0;
  uint32_t held = 0;  // blocks held for readers or writers elsewhere (HoldBlocks, HoldForWriting),
                      // in in_use too
  uint64_t allocated_blocks = 0;  // blank blocks handed out
  uint64_t reused_blocks = 0, partial_reuses = 0, partial_copies = 0;
  std::array<uint64_t, 101> evictions_by_priority{};
  uint64_t offloads = 0;
};

class BlockPool {
 public:
  [[nodiscard]] static Result<std::unique_ptr<BlockPool>> Create(const BlockPoolOptions& options);
  ~BlockPool();

  // ---- blocks without sequences (the engine manages its own tables) -------------------
  // `count` blank blocks, each with one reference, evicting as needed.
  [[nodiscard]] Status AllocateBlocks(uint32_t count, std::vector<BlockId>* blocks,
                                      std::vector<EvictedBlock>* evicted);
  // Drops the reference AllocateBlocks gave each block. kOutOfRange: not a block of this
  // pool; kFailedPrecondition: a block AllocateBlocks did not hand out or that was freed
  // since (a double free, also within the call), such as a sequence's block, which only
  // FreeSequence frees. Nothing is freed on error.
  [[nodiscard]] Status FreeBlocks(std::span<const BlockId> blocks);

  // Holds each committed block for a reader elsewhere (a peer's fetch copying it on
  // another thread): until ReleaseBlocks, the block is neither evicted nor overwritten by a
  // partial reuse. A hold is a reference of its own: FreeBlocks never drops it.
  // kOutOfRange: not a block of this pool; kFailedPrecondition: a block not committed.
  // Nothing is held on error.
  [[nodiscard]] Status HoldBlocks(std::span<const BlockId> blocks);
  // Holds each blank block of a sequence (allocated, not committed) for a writer elsewhere
  // (a peer's blocks received in place on another thread): until ReleaseBlocks, the block
  // is not handed out again even if its sequence frees it (it goes back to the free list
  // with its last hold). Its sequence may still commit it. kOutOfRange as HoldBlocks;
  // kFailedPrecondition: a committed block, or one that no sequence references. Nothing
  // is held on error.
  [[nodiscard]] Status HoldForWriting(std::span<const BlockId> blocks);
  // Keeps checksums[i] as held block i's payload checksum (XXH3, which a reader holding it
  // computed: a committed block's bytes do not change), given in PoolHolding from then on
  // and forgotten when the block leaves the cache. A 0, a block not committed or not held
  // keeps nothing. kInvalidArgument: sizes differ; kOutOfRange as FreeBlocks. Nothing is
  // kept on error.
  [[nodiscard]] Status RememberChecksums(std::span<const BlockId> blocks,
                                         std::span<const uint64_t> checksums);
  // Drops one hold of each block. kOutOfRange as FreeBlocks; kFailedPrecondition: a block
  // released more often than it is held (also within the call). Nothing released on error.
  [[nodiscard]] Status ReleaseBlocks(std::span<const BlockId> blocks);

  // ---- sequences ----------------------------------------------------------------------
  // A windowed sequence's table holds kNoBlock for the blocks a reused prefix skips (those
  // between its sinks and its last window) and for those that left its window since.
  [[nodiscard]] Result<SequenceStart> StartSequence(const SequenceRequest& request);
  // What StartSequence(request) would answer but for the change: OK where it would start
  // the sequence, else its error (kResourceExhausted: too few blocks). Changes nothing.
  [[nodiscard]] Status CanStart(const SequenceRequest& request) const;
  // Likewise for Extend(id, tokens).
  [[nodiscard]] Status CanExtend(SequenceId id, uint32_t tokens) const;
  // Adds `tokens` tokens (decode or a prefill chunk); new blocks as they are needed
  // (none for a static sequence). A windowed sequence lets go of the blocks the first
  // token added no longer attends (all of theirs before its window). kOutOfRange past a
  // static sequence's reserve: nothing changes.
  [[nodiscard]] Result<SequenceGrowth> Extend(SequenceId id, uint32_t tokens);
  // Commits the sequence's first block_keys.size() full blocks under those keys (the
  // chain from request.root), storing `tokens` (all of theirs, or none: then they are no
  // partial-reuse candidates) for partial reuse, with one retention per key or none (the
  // default priority). Blocks already committed keep their key.
  [[nodiscard]] Status Commit(SequenceId id, std::span<const BlockKey> block_keys,
                              std::span<const uint32_t> tokens,
                              std::span<const BlockRetention> retention);
  // Releases every block of the sequence (committed ones stay cached).
  [[nodiscard]] Status FreeSequence(SequenceId id);
  [[nodiscard]] Result<std::vector<BlockId>> BlockTable(SequenceId id) const;

  // ---- prefix reuse (prefix_reuse.cc) ---------------------------------------------------
  // servable[m], m in [0, keys.size()]: whether a sequence over the first m blocks of the
  // chain `keys` from `root` finds their KV here: every one of them in a full-attention
  // pool; in a windowed pool its sink blocks and its last window (the blocks between left
  // every window: attention never reads them). servable[0] is true.
  std::vector<bool> ServablePrefixes(const BlockKey& root, std::span<const BlockKey> keys) const;
  // The longest servable prefix, in blocks.
  uint32_t LookupPrefix(const BlockKey& root, std::span<const BlockKey> keys) const;
  // The tokens of `tokens` (a prompt) after its first `reused_blocks` blocks that partial
  // reuse finds here in a cached block of `format_tag` (0 with partial reuse off).
  // REQUIRES: reused_blocks <= keys.size().
  uint32_t PartialReuseTokens(const BlockKey& root, std::span<const BlockKey> keys,
                              uint32_t reused_blocks, std::span<const uint32_t> tokens,
                              uint64_t format_tag) const;
  // The committed block cached under `key`, whatever its chain (a peer fetching it);
  // retention_left is left 0 and tokens empty (not computed here).
  std::optional<PoolHolding> Find(const BlockKey& key) const;
  // The tokens the block cached under `key` was committed with; empty when it was
  // committed without them, partial reuse is off, or nothing is cached under `key`.
  // Valid until the pool next changes.
  std::span<const uint32_t> TokensOf(const BlockKey& key) const;

  void AdvanceTime();
  // Events since the last call, in sequence order.
  std::vector<PoolEvent> TakeEvents();
  // Every committed block the pool holds (in use or cached), with its priority and what
  // is left of its retention: the worker's snapshot for the coordinator after a resync.
  std::vector<PoolHolding> Holdings() const;
  BlockPoolStats Stats() const;
  const BlockPoolOptions& options() const;

  class Impl;

 private:
  explicit BlockPool(std::unique_ptr<Impl> impl);
  // StartSequence's decisions, checked, before it changes anything (prefix_reuse.cc).
  [[nodiscard]] Result<struct StartPlan> PlanStart(const SequenceRequest& request) const;
  // HoldBlocks (`committed`) and HoldForWriting.
  [[nodiscard]] Status Hold(std::span<const BlockId> blocks, bool committed);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::worker
