// BlockPool::Impl: the pool's state and its block-level primitives (reference counts,
// the cache index, eviction, events). Internal to services/worker/pool; the sequence
// operations are in block_pool.cc.
#pragma once

#include <algorithm>
#include <span>
#include <utility>
#include <memory_resource>
#include <unordered_map>

#include "services/worker/pool/block_pool.h"
#include "common/deadline_heap.h"
#include "common/prioritized_lru.h"

namespace kvtier::worker {

struct BlockMeta {
  BlockKey key{};
  BlockKey parent_key{};
  uint64_t format_tag = 0;
  uint64_t salt_scope = 0;
  uint64_t checksum = 0;      // committed: its payload's XXH3 as a reader computed it (0: none yet)
  BlockId parent = kNoBlock;  // the parent's block when cached here (full-attention pools)
  uint32_t refs = 0;
  uint32_t holds = 0;  // of refs, readers' holds (HoldBlocks), which FreeBlocks never drops
  uint32_t cached_children = 0;  // committed children cached here
  // Matches the block's live expiry entry. It outlives the block's commit (Uncache bumps it),
  // so that an entry of an evicted commit never matches the next one; 32 bits, so that
  // it does not wrap while an old entry waits in the heap.
  uint32_t retention_seq = 0;
  uint8_t priority = kDefaultPriority;
  bool committed = false;
  bool partial_candidate = false;  // its tokens are stored: a partial-reuse candidate
  bool first = false;              // the chain's first block (its parent is the salt root)
  bool allocated =
      false;  // handed out by AllocateBlocks, not freed yet: FreeBlocks may drop its reference
};

struct Sequence {
  std::vector<BlockId> table;
  uint32_t tokens = 0;
  BlockKey root;
  uint64_t format_tag = 0;
  uint64_t salt_scope = 0;
  uint32_t reserved_tokens = 0;  // a static sequence's fixed capacity; 0: dynamic
};

using Expiry = DeadlineHeap<uint32_t>::Entry;

inline uint32_t BlocksFor(uint64_t tokens, uint32_t tokens_per_block) {
  return static_cast<uint32_t>((tokens + tokens_per_block - 1) / tokens_per_block);
}

// A pool's window in blocks, as the coordinator counts it (block_index.h's PoolWindow):
// a sequence of m blocks needs blocks [0, sinks) and [m - window, m). Full attention:
// no sinks, an unlimited window.
struct PoolWindowBlocks {
  uint32_t sinks = 0;
  uint32_t window = UINT32_MAX;
};

// What StartSequence does (BlockPool::PlanStart): the prefix it reuses, the partial
// block after it, the blank blocks it takes.
struct StartPlan {
  uint32_t matched = 0;  // reused prefix, in blocks
  PoolWindowBlocks window;
  BlockId partial = kNoBlock;
  uint32_t partial_tokens = 0;
  bool in_place = false;
  uint32_t needed = 0;  // table entries
  uint32_t blank = 0;   // blank blocks taken

  // Whether reused block i (< matched) is in the table (a windowed reuse skips the rest).
  bool Kept(uint32_t i) const {
    return i < window.sinks || window.window >= matched || i >= matched - window.window;
  }
};

// Cached blocks grouped by (parent key, format tag): the partial-reuse candidates.
struct ChildGroup {
  BlockKey parent;
  uint64_t format_tag;
  friend bool operator==(const ChildGroup&, const ChildGroup&) = default;
};
struct ChildGroupHash {
  size_t operator()(const ChildGroup& g) const {
    return BlockKeyHash{}(g.parent) ^ (g.format_tag * 0x9E3779B97F4A7C15ULL);
  }
};

class BlockPool::Impl {
 public:
  explicit Impl(const BlockPoolOptions& o) : options_(o), metas_(o.num_blocks), lru_(o.num_blocks) {
    free_.reserve(o.num_blocks);
    for (uint32_t b = o.num_blocks; b-- > 0;) free_.push_back(b);  // block 0 first
    index_.reserve(o.num_blocks);
    if (o.partial_reuse) tokens_.resize(size_t{o.num_blocks} * o.tokens_per_block);
  }

  bool windowed() const { return options_.window_tokens != 0; }
  PoolWindowBlocks WindowBlocks() const {
    if (!windowed()) return {};
    const uint32_t tpb = options_.tokens_per_block;
    return {BlocksFor(options_.sink_tokens, tpb), BlocksFor(options_.window_tokens, tpb)};
  }
  size_t Available() const { return free_.size() + lru_.size(); }

  void Ref(BlockId b) {
    BlockMeta& m = metas_[b];
    if (m.refs++ == 0 && m.committed) lru_.Remove(b);
  }

  void Unref(BlockId b) {
    BlockMeta& m = metas_[b];
    if (--m.refs != 0) return;
    if (m.committed)
      lru_.PushMostRecent(b, m.priority);
    else
      free_.push_back(b);
  }

  // OK when dropping one reference per listed block (a block may repeat) takes no block
  // below zero of the `dropping(b)` it may drop; else the first block that fails, `what`
  // it was, and nothing changed.
  template <typename Droppable>
  Status CheckDrops(std::span<const BlockId> blocks, Droppable droppable, const char* what) {
    if (free_marks_.empty()) free_marks_.assign(metas_.size(), 0);
    // Drops this call makes per block, so that a block listed twice with one reference
    // fails too; the marks are cleared again either way.
    Status status = Status::Ok();
    size_t checked = 0;
    for (; checked < blocks.size(); ++checked) {
      const BlockId b = blocks[checked];
      if (b >= metas_.size()) {
        status =
            OutOfRangeError("block " + std::to_string(b) + " is not a block of this pool (it has " +
                            std::to_string(metas_.size()) + ")");
        break;
      }
      if (++free_marks_[b] > droppable(b)) {
        status = FailedPreconditionError("block " + std::to_string(b) + " is " + what);
        ++checked;
        break;
      }
    }
    for (size_t i = 0; i < checked; ++i) {
      if (blocks[i] < metas_.size()) free_marks_[blocks[i]] = 0;
    }
    return status;
  }

  // Partial reuse: the cached child of `parent_key` whose tokens share the longest lead
  // with `rest` (the prompt after the matched prefix), and how many it shares; kNoBlock
  // and 0 when none shares any, or partial reuse is off.
  std::pair<BlockId, uint32_t> BestPartial(const BlockKey& parent_key, uint64_t format_tag,
                                           std::span<const uint32_t> rest) const {
    BlockId best = kNoBlock;
    uint32_t best_tokens = 0;
    if (!options_.partial_reuse || rest.empty()) return {best, best_tokens};
    const auto group = children_.find({parent_key, format_tag});
    if (group == children_.end()) return {best, best_tokens};
    const uint32_t tpb = options_.tokens_per_block;
    const size_t limit = std::min<size_t>(tpb, rest.size());
    for (const BlockId c : group->second) {
      const uint32_t* cached = tokens_.data() + size_t{c} * tpb;
      const auto common = static_cast<uint32_t>(
          std::mismatch(rest.begin(), rest.begin() + limit, cached).first - rest.begin());
      if (common > best_tokens) {
        best = c;
        best_tokens = common;
      }
    }
    return {best, best_tokens};
  }

  Status NeedBlocks(size_t count) const {
    if (count <= Available()) return Status::Ok();
    return ResourceExhaustedError("block pool is full: " + std::to_string(count) +
                                  " blocks needed, " + std::to_string(free_.size()) + " free and " +
                                  std::to_string(lru_.size()) + " evictable of " +
                                  std::to_string(options_.num_blocks));
  }

  // A blank block with one reference. REQUIRES: NeedBlocks passed for it.
  BlockId TakeBlank(std::vector<EvictedBlock>* evicted) {
    BlockId b;
    if (!free_.empty()) {
      b = free_.back();
      free_.pop_back();
    } else {
      b = EvictOne(evicted);
    }
    metas_[b].refs = 1;
    metas_[b].allocated = false;  // AllocateBlocks sets it for its own blocks
    ++stats_.allocated_blocks;
    return b;
  }

  BlockId EvictOne(std::vector<EvictedBlock>* evicted) {
    // Full attention: leaves only. Windowed: anything unreferenced (see the header).
    BlockId victim =
        lru_.FindVictim([&](uint32_t b) { return windowed() || metas_[b].cached_children == 0; });
    // Every unreferenced block is interior only when a child is in use through another
    // block of the same content (Commit skips duplicates): then the LRU head goes.
    if (victim == PrioritizedLru::kNil) victim = lru_.FindVictim([](uint32_t) { return true; });
    const BlockMeta& m = metas_[victim];
    const bool offload = m.priority >= options_.secondary_offload_min_priority;
    evicted->push_back(
        {victim, m.key, m.parent_key, m.first, m.format_tag, m.salt_scope, m.priority, offload});
    Emit(offload ? PoolEvent::Kind::kOffloaded : PoolEvent::Kind::kRemoved, victim);
    ++stats_.evictions_by_priority[m.priority];
    stats_.offloads += offload;
    Uncache(victim);
    return victim;
  }

  // Removes a committed block from the cache; it keeps its references. Cached children
  // lose their parent link (a scan, on the rare path where an interior block goes).
  void Uncache(BlockId b) {
    BlockMeta& m = metas_[b];
    if (m.refs == 0) lru_.Remove(b);
    index_.erase(m.key);
    if (m.parent != kNoBlock) --metas_[m.parent].cached_children;
    if (m.partial_candidate) {
      auto group = children_.find({m.parent_key, m.format_tag});
      std::erase(group->second, b);
      if (group->second.empty()) children_.erase(group);
    }
    for (BlockId c = 0; m.cached_children > 0 && c < metas_.size(); ++c) {
      if (metas_[c].committed && metas_[c].parent == b) {
        metas_[c].parent = kNoBlock;
        --m.cached_children;
      }
    }
    m = BlockMeta{.refs = m.refs,
                  .retention_seq = m.retention_seq + 1};  // its expiry entries die with it
  }

  void CommitBlock(BlockId b, const BlockKey& key, const BlockKey& parent_key, const Sequence& seq,
                   std::span<const uint32_t> tokens, const BlockRetention& retention) {
    const uint64_t format_tag = seq.format_tag;
    BlockMeta& m = metas_[b];
    m.salt_scope = seq.salt_scope;
    m.key = key;
    m.parent_key = parent_key;
    m.first = parent_key == seq.root;
    m.format_tag = format_tag;
    m.checksum = 0;  // its bytes are new
    m.committed = true;
    m.priority = retention.priority;
    // Parent links serve leaf-first eviction, which windowed pools do not use.
    const auto parent = windowed() ? index_.end() : index_.find(parent_key);
    m.parent = parent == index_.end() ? kNoBlock : parent->second;
    if (m.parent != kNoBlock) ++metas_[m.parent].cached_children;
    index_.emplace(key, b);
    m.partial_candidate = options_.partial_reuse && !tokens.empty();
    if (m.partial_candidate) {
      std::copy(tokens.begin(), tokens.end(),
                tokens_.begin() + size_t{b} * options_.tokens_per_block);
      children_[{parent_key, format_tag}].push_back(b);
    }
    SetExpiry(b, retention);
    Emit(PoolEvent::Kind::kStored, b);
    if (retention.priority != kDefaultPriority) events_.back().retention = retention.duration;
  }

  void SetPriority(BlockId b, uint8_t priority) {
    BlockMeta& m = metas_[b];
    if (m.priority == priority) return;
    const bool listed = m.committed && m.refs == 0;
    if (listed) lru_.Remove(b);
    m.priority = priority;
    if (listed) lru_.PushMostRecent(b, priority);
  }

  void SetExpiry(BlockId b, const BlockRetention& retention) {
    BlockMeta& m = metas_[b];
    ++m.retention_seq;
    if (retention.duration.count() > 0 && retention.priority != kDefaultPriority) {
      expiry_.Push({(options_.clock->Now() + retention.duration).count(), b, m.retention_seq},
                   [this](const Expiry& e) { return ExpiryLive(e); });
    }
  }

  // Whether `e` is its block's current retention deadline (not replaced, not evicted).
  bool ExpiryLive(const Expiry& e) const {
    return metas_[e.id].committed && metas_[e.id].retention_seq == e.generation;
  }

  void Emit(PoolEvent::Kind kind, BlockId b) {
    const BlockMeta& m = metas_[b];
    events_.push_back(
        {kind, ++next_event_, m.key, m.parent_key, m.first, b, m.priority, m.salt_scope});
  }

  BlockPoolOptions options_;
  std::vector<BlockMeta> metas_;
  std::vector<BlockId> free_;
  PrioritizedLru lru_;
  // Every cached block's node comes from index_nodes_, which keeps the nodes of blocks
  // evicted for the next ones: caching a block allocates nothing once the pool has been
  // full (and at most a chunk per doubling before), where a plain map allocates a node
  // per block an onboard or a commit lands.
  std::pmr::unsynchronized_pool_resource index_nodes_;
  std::pmr::unordered_map<BlockKey, BlockId, BlockKeyHash> index_{&index_nodes_};
  std::unordered_map<ChildGroup, std::vector<BlockId>, ChildGroupHash> children_;
  std::vector<uint32_t> tokens_;  // tokens of committed blocks, for partial reuse
  std::unordered_map<SequenceId, Sequence> sequences_;
  DeadlineHeap<uint32_t> expiry_;  // retention deadlines, by BlockMeta::retention_seq
  std::vector<PoolEvent> events_;
  uint64_t next_event_ = 0;
  std::vector<uint32_t> free_marks_;  // CheckDrops: references one call drops, per block
  BlockPoolStats stats_;
};

}  // namespace kvtier::worker
