#include "services/worker/pool/block_pool.h"

#include <unordered_map>

#include <algorithm>
#include <string>

#include "common/vector_growth.h"
#include "services/worker/pool/block_pool_impl.h"

namespace kvtier::worker {
namespace {

Status CheckRetention(std::span<const BlockRetention> retention, size_t keys) {
  if (!retention.empty() && retention.size() != keys) {
    return InvalidArgumentError("commit has " + std::to_string(keys) + " block keys but " +
                                std::to_string(retention.size()) + " retention entries");
  }
  for (size_t i = 0; i < retention.size(); ++i) {
    if (retention[i].priority > kvtier::kMaxPriority) {
      return InvalidArgumentError("block " + std::to_string(i) + ": priority " +
                                  std::to_string(retention[i].priority) +
                                  " is out of range [0, 100]");
    }
  }
  return Status::Ok();
}

}  // namespace

Status BlockPool::AllocateBlocks(uint32_t count, std::vector<BlockId>* blocks,
                                 std::vector<EvictedBlock>* evicted) {
  KVTIER_RETURN_IF_ERROR(impl_->NeedBlocks(count));
  for (uint32_t i = 0; i < count; ++i) {
    blocks->push_back(impl_->TakeBlank(evicted));
    impl_->metas_[blocks->back()].allocated = true;
  }
  return Status::Ok();
}

Status BlockPool::FreeBlocks(std::span<const BlockId> blocks) {
  Impl& p = *impl_;
  // The one reference AllocateBlocks gave is the caller's to drop; a sequence's references
  // (FreeSequence drops them) and a reader's or writer's hold (ReleaseBlocks) are not.
  KVTIER_RETURN_IF_ERROR(p.CheckDrops(
      blocks, [&](BlockId b) { return p.metas_[b].allocated ? 1u : 0u; },
      "not held by AllocateBlocks (a double free, or a sequence's block); "
      "nothing was freed"));
  for (const BlockId b : blocks) {
    p.metas_[b].allocated = false;
    p.Unref(b);
  }
  return Status::Ok();
}

Status BlockPool::HoldBlocks(std::span<const BlockId> blocks) {
  return Hold(blocks, /*committed=*/true);
}

Status BlockPool::HoldForWriting(std::span<const BlockId> blocks) {
  return Hold(blocks, /*committed=*/false);
}

Status BlockPool::Hold(std::span<const BlockId> blocks, bool committed) {
  Impl& p = *impl_;
  for (const BlockId b : blocks) {
    if (b >= p.metas_.size()) {
      return OutOfRangeError("block " + std::to_string(b) +
                             " is not a block of this pool (it has " +
                             std::to_string(p.metas_.size()) + "); nothing was held");
    }
    const BlockMeta& m = p.metas_[b];
    if (committed && !m.committed) {
      return FailedPreconditionError("block " + std::to_string(b) +
                                     " is not committed; nothing was held");
    }
    if (!committed && (m.committed || m.refs == m.holds)) {
      const char* const why = m.committed ? " is committed" : " is in no sequence";
      return FailedPreconditionError(
          "block " + std::to_string(b) + why +
          ": only a sequence's blank blocks are held for writing; nothing was held");
    }
  }
  for (const BlockId b : blocks) {
    if (p.metas_[b].holds++ == 0) ++p.stats_.held;
    p.Ref(b);
  }
  return Status::Ok();
}

Status BlockPool::ReleaseBlocks(std::span<const BlockId> blocks) {
  Impl& p = *impl_;
  KVTIER_RETURN_IF_ERROR(p.CheckDrops(
      blocks, [&](BlockId b) { return p.metas_[b].holds; },
      "released more often than it is held; nothing was released"));
  for (const BlockId b : blocks) {
    if (--p.metas_[b].holds == 0) --p.stats_.held;
    p.Unref(b);
  }
  return Status::Ok();
}

std::optional<PoolHolding> BlockPool::Find(const BlockKey& key) const {
  const auto it = impl_->index_.find(key);
  if (it == impl_->index_.end()) return std::nullopt;
  const BlockMeta& m = impl_->metas_[it->second];
  PoolHolding holding{it->second, m.key,    m.parent_key, m.first,
                      m.priority, Nanos{0}, m.salt_scope, m.format_tag};
  holding.checksum = m.checksum;
  return holding;
}

Status BlockPool::RememberChecksums(std::span<const BlockId> blocks,
                                    std::span<const uint64_t> checksums) {
  Impl& p = *impl_;
  if (blocks.size() != checksums.size()) {
    return InvalidArgumentError(std::to_string(checksums.size()) + " checksums for " +
                                std::to_string(blocks.size()) + " blocks; nothing was kept");
  }
  for (const BlockId b : blocks) {
    if (b >= p.metas_.size()) {
      return OutOfRangeError("block " + std::to_string(b) +
                             " is not a block of this pool (it has " +
                             std::to_string(p.metas_.size()) + "); nothing was kept");
    }
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    BlockMeta& m = p.metas_[blocks[i]];
    if (m.committed && m.holds > 0 && checksums[i] != 0) m.checksum = checksums[i];
  }
  return Status::Ok();
}

std::span<const uint32_t> BlockPool::TokensOf(const BlockKey& key) const {
  const auto it = impl_->index_.find(key);
  if (it == impl_->index_.end() || !impl_->metas_[it->second].partial_candidate) return {};
  const uint32_t tpb = impl_->options_.tokens_per_block;
  return std::span<const uint32_t>(impl_->tokens_).subspan(size_t{it->second} * tpb, tpb);
}

Result<SequenceStart> BlockPool::StartSequence(const SequenceRequest& r) {
  KVTIER_ASSIGN_OR_RETURN(const StartPlan plan, PlanStart(r));
  Impl& p = *impl_;
  SequenceStart start;
  start.block_table.reserve(plan.needed);
  for (uint32_t i = 0; i < plan.matched; ++i) {
    if (!plan.Kept(i)) {
      start.block_table.push_back(kNoBlock);
      continue;
    }
    const BlockId b = p.index_.at(r.block_keys[i]);
    p.Ref(b);
    start.block_table.push_back(b);
  }
  const BlockId partial = plan.partial;
  if (partial != kNoBlock) p.Ref(partial);  // pinned: the copy source must survive eviction
  if (plan.in_place) {
    p.Emit(PoolEvent::Kind::kRemoved, partial);  // its tail will be overwritten
    p.Uncache(partial);
    start.block_table.push_back(partial);
    ++p.stats_.partial_reuses;
  }
  // Blank blocks come from the free list, then by eviction: each vector grows once.
  const size_t evictions = plan.blank > p.free_.size() ? plan.blank - p.free_.size() : 0;
  start.evicted.reserve(evictions);
  GrowFor(p.events_, evictions);
  while (start.block_table.size() < plan.needed)
    start.block_table.push_back(p.TakeBlank(&start.evicted));
  if (partial != kNoBlock && !plan.in_place) {
    start.copy = PartialCopy{partial, start.block_table[plan.matched], plan.partial_tokens};
    p.Unref(partial);  // stays cached
    ++p.stats_.partial_copies;
  }
  const uint32_t tpb = p.options_.tokens_per_block;
  start.reused_blocks = plan.matched;
  start.reused_tokens = plan.matched * tpb + plan.partial_tokens;
  p.stats_.reused_blocks += plan.matched;
  const auto prompt = static_cast<uint32_t>(r.tokens.empty() ? r.num_tokens : r.tokens.size());
  p.sequences_.emplace(r.id, Sequence{start.block_table, prompt, r.root, r.format_tag, r.salt_scope,
                                      r.reserve_tokens});
  return start;
}

Status BlockPool::CanExtend(SequenceId id, uint32_t tokens) const {
  const Impl& p = *impl_;
  const auto it = p.sequences_.find(id);
  if (it == p.sequences_.end())
    return NotFoundError("sequence " + std::to_string(id) + " is not in this pool");
  const Sequence& seq = it->second;
  const uint64_t total = uint64_t{seq.tokens} + tokens;
  if (total > UINT32_MAX)
    return OutOfRangeError("sequence " + std::to_string(id) + " would exceed 2^32 tokens");
  if (seq.reserved_tokens != 0) {  // static: its table is fixed
    if (total <= seq.reserved_tokens) return Status::Ok();
    return OutOfRangeError("static sequence " + std::to_string(id) + " reserved " +
                           std::to_string(seq.reserved_tokens) + " tokens; " +
                           std::to_string(total) + " would not fit");
  }
  return p.NeedBlocks(BlocksFor(total, p.options_.tokens_per_block) - seq.table.size());
}

Result<SequenceGrowth> BlockPool::Extend(SequenceId id, uint32_t tokens) {
  KVTIER_RETURN_IF_ERROR(CanExtend(id, tokens));
  Impl& p = *impl_;
  Sequence& seq = p.sequences_.find(id)->second;
  const uint32_t tpb = p.options_.tokens_per_block;
  const uint64_t total = uint64_t{seq.tokens} + tokens;
  if (seq.reserved_tokens != 0) {
    seq.tokens = static_cast<uint32_t>(total);
    return SequenceGrowth{};
  }
  const uint32_t blank = BlocksFor(total, tpb) - static_cast<uint32_t>(seq.table.size());
  SequenceGrowth growth;
  for (uint32_t i = 0; i < blank; ++i) {
    growth.new_blocks.push_back(p.TakeBlank(&growth.evicted));
    seq.table.push_back(growth.new_blocks.back());
  }
  seq.tokens = static_cast<uint32_t>(total);
  // Block i left the window when all its tokens precede the window of the first token
  // added (position `old`), which the chunk's attention reads: [old + 1 - window, old].
  // Blocks holding a sink token stay.
  const uint32_t old = seq.tokens - tokens;
  if (p.windowed() && old + 1 > p.options_.window_tokens) {
    const uint32_t sink_blocks = BlocksFor(p.options_.sink_tokens, tpb);
    const uint32_t out_of_window = (old + 1 - p.options_.window_tokens) / tpb;
    for (uint32_t i = sink_blocks; i < out_of_window; ++i) {
      if (seq.table[i] == kNoBlock) continue;
      growth.released.push_back(seq.table[i]);
      p.Unref(seq.table[i]);
      seq.table[i] = kNoBlock;
    }
  }
  return growth;
}

Status BlockPool::Commit(SequenceId id, std::span<const BlockKey> keys,
                         std::span<const uint32_t> tokens,
                         std::span<const BlockRetention> retention) {
  Impl& p = *impl_;
  const auto it = p.sequences_.find(id);
  if (it == p.sequences_.end())
    return NotFoundError("sequence " + std::to_string(id) + " is not in this pool");
  Sequence& seq = it->second;
  const uint32_t tpb = p.options_.tokens_per_block;
  if (keys.size() * tpb > seq.tokens) {
    return InvalidArgumentError("commit of " + std::to_string(keys.size()) +
                                " full blocks, but sequence " + std::to_string(id) + " has " +
                                std::to_string(seq.tokens) + " tokens");
  }
  if (!tokens.empty() && tokens.size() < keys.size() * tpb) {
    return InvalidArgumentError("commit of " + std::to_string(keys.size()) +
                                " blocks needs their " + std::to_string(keys.size() * tpb) +
                                " tokens, got " + std::to_string(tokens.size()));
  }
  KVTIER_RETURN_IF_ERROR(CheckRetention(retention, keys.size()));
  GrowFor(p.events_, keys.size());  // a stored event per block at most: one allocation
  for (size_t i = 0; i < keys.size(); ++i) {
    const BlockId b = seq.table[i];
    if (b != kNoBlock && p.metas_[b].committed && !(p.metas_[b].key == keys[i])) {
      return InvalidArgumentError("block " + std::to_string(i) + " of sequence " +
                                  std::to_string(id) + " is committed as " +
                                  p.metas_[b].key.ToHex() + ", not " + keys[i].ToHex());
    }
  }
  BlockKey parent = seq.root;
  for (size_t i = 0; i < keys.size(); ++i) {
    const BlockId b = seq.table[i];
    const BlockRetention r = retention.empty() ? BlockRetention{} : retention[i];
    if (b == kNoBlock) {
      // left the window before it was committed: nothing to cache
    } else if (p.metas_[b].committed) {
      if (!retention.empty()) {
        p.SetPriority(b, r.priority);
        p.SetExpiry(b, r);
      }
    } else if (!p.index_.contains(keys[i])) {  // another block may already cache the same content
      const auto block_tokens = tokens.empty() ? tokens : tokens.subspan(i * tpb, tpb);
      p.CommitBlock(b, keys[i], parent, seq, block_tokens, r);
    }
    parent = keys[i];
  }
  return Status::Ok();
}

Status BlockPool::FreeSequence(SequenceId id) {
  Impl& p = *impl_;
  const auto it = p.sequences_.find(id);
  if (it == p.sequences_.end())
    return NotFoundError("sequence " + std::to_string(id) + " is not in this pool");
  // Deepest first: descendants become less recent than their ancestors, so eviction
  // meets leaves first. A windowed pool first lets go of the blocks between the sinks and
  // the last window, which a later sequence over this prefix does not need.
  std::vector<BlockId>& table = it->second.table;
  if (p.windowed()) {
    const PoolWindowBlocks window = p.WindowBlocks();
    const auto full = static_cast<uint32_t>(table.size());
    for (uint32_t i = window.sinks; full > window.window && i < full - window.window; ++i) {
      if (table[i] != kNoBlock) p.Unref(std::exchange(table[i], kNoBlock));
    }
  }
  for (auto b = table.rbegin(); b != table.rend(); ++b) {
    if (*b != kNoBlock) p.Unref(*b);
  }
  p.sequences_.erase(it);
  return Status::Ok();
}

Result<std::vector<BlockId>> BlockPool::BlockTable(SequenceId id) const {
  const auto it = impl_->sequences_.find(id);
  if (it == impl_->sequences_.end())
    return NotFoundError("sequence " + std::to_string(id) + " is not in this pool");
  return it->second.table;
}

void BlockPool::AdvanceTime() {
  Impl& p = *impl_;
  p.expiry_.PopDue(
      p.options_.clock->Now().count(), [&](const Expiry& e) { return p.ExpiryLive(e); },
      [&](const Expiry& e) { p.SetPriority(e.id, kDefaultPriority); });
}

std::vector<PoolEvent> BlockPool::TakeEvents() {
  std::vector<PoolEvent> events;
  events.swap(impl_->events_);
  return events;
}

std::vector<PoolHolding> BlockPool::Holdings() const {
  const Impl& w = *impl_;
  // Live retention deadlines (one per block at most; snapshots are rare).
  std::unordered_map<BlockId, int64_t> deadlines;
  w.expiry_.ForEach([&](const Expiry& e) {
    if (w.ExpiryLive(e)) deadlines[e.id] = e.deadline_ns;
  });
  const int64_t now = w.options_.clock->Now().count();
  std::vector<PoolHolding> holdings;
  holdings.reserve(w.index_.size());
  for (const auto& [key, block] : w.index_) {
    const BlockMeta& m = w.metas_[block];
    const auto deadline = deadlines.find(block);
    const Nanos left{deadline == deadlines.end() ? 0
                                                 : std::max<int64_t>(deadline->second - now, 1)};
    const std::span<const uint32_t> tokens = TokensOf(key);
    holdings.push_back({block,
                        m.key,
                        m.parent_key,
                        m.first,
                        m.priority,
                        left,
                        m.salt_scope,
                        m.format_tag,
                        {tokens.begin(), tokens.end()}});
  }
  return holdings;
}

BlockPoolStats BlockPool::Stats() const {
  BlockPoolStats stats = impl_->stats_;
  stats.total = impl_->options_.num_blocks;
  stats.free = static_cast<uint32_t>(impl_->free_.size());
  stats.cached = static_cast<uint32_t>(impl_->lru_.size());
  stats.in_use = stats.total - stats.free - stats.cached;
  return stats;
}

const BlockPoolOptions& BlockPool::options() const { return impl_->options_; }

Result<std::unique_ptr<BlockPool>> BlockPool::Create(const BlockPoolOptions& o) {
  if (o.num_blocks == 0 || o.num_blocks == kNoBlock) {
    return InvalidArgumentError("block pool: num_blocks must be in [1, " +
                                std::to_string(kNoBlock - 1) + "]");
  }
  if (o.tokens_per_block == 0)
    return InvalidArgumentError("block pool: tokens_per_block must be at least 1");
  if (o.secondary_offload_min_priority > kvtier::kMaxPriority) {
    return InvalidArgumentError("block pool: secondary_offload_min_priority " +
                                std::to_string(o.secondary_offload_min_priority) +
                                " is out of range [0, 100]");
  }
  if (o.window_tokens == 0 && o.sink_tokens != 0) {
    return InvalidArgumentError(
        "block pool: sink_tokens needs a limited window (window_tokens > 0)");
  }
  if (o.clock == nullptr) return InvalidArgumentError("block pool: clock is null");
  return std::unique_ptr<BlockPool>(new BlockPool(std::make_unique<Impl>(o)));
}

BlockPool::BlockPool(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BlockPool::~BlockPool() = default;

}  // namespace kvtier::worker
