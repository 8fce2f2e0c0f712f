#include "services/worker/worker.h"

#include "services/worker/worker_impl.h"

namespace kvtier::worker {

std::vector<Status> OffloadTarget::OffloadBatch(std::span<const OffloadBlock> blocks) {
  std::vector<Status> taken;
  taken.reserve(blocks.size());
  for (const OffloadBlock& block : blocks) taken.push_back(Offload(block));
  return taken;
}

void OnboardSource::Landed(std::span<const OnboardBlock>, std::span<const SourceTier>) {}

std::vector<Result<SourceTier>> OnboardSource::FetchBatch(std::span<const OnboardBlock> blocks) {
  std::vector<Result<SourceTier>> tiers;
  tiers.reserve(blocks.size());
  for (const OnboardBlock& block : blocks) {
    const bool stopped = !tiers.empty() && !tiers.back().ok();
    tiers.push_back(
        stopped ? Result<SourceTier>(AbortedError("not asked: an earlier block was not fetched"))
                : Fetch(block));
  }
  return tiers;
}

Result<std::unique_ptr<Worker>> Worker::Create(const WorkerOptions& options) {
  if (options.pools.empty()) return InvalidArgumentError("worker: no pools configured");
  auto impl = std::make_unique<Impl>(options);
  for (size_t i = 0; i < options.pools.size(); ++i) {
    const WorkerPoolConfig& config = options.pools[i];
    const KvLayout& layout = config.layout;
    KVTIER_ASSIGN_OR_RETURN(
        auto pool,
        BlockPool::Create({.num_blocks = config.num_blocks,
                           .tokens_per_block = layout.tokens_per_block(),
                           .window_tokens = layout.attention_window(),
                           .sink_tokens = layout.sink_tokens(),
                           .secondary_offload_min_priority = options.secondary_offload_min_priority,
                           .partial_reuse = options.partial_reuse,
                           .clock = options.clock}));
    const size_t bytes = size_t{config.num_blocks} * layout.bytes_per_block();
    KVTIER_ASSIGN_OR_RETURN(auto storage, options.pool_storage ? options.pool_storage(bytes)
                                          : options.device >= 0
                                              ? MakeDevicePoolStorage(options.device, bytes)
                                              : MakeHostPoolStorage(bytes));
    impl->pools_.push_back({layout, std::move(pool), std::move(storage)});
  }
  return std::unique_ptr<Worker>(new Worker(std::move(impl)));
}

Worker::Worker(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Worker::~Worker() = default;

Result<PoolAttachment> Worker::AttachPool(uint32_t pool_id, const KvLayout& layout) const {
  KVTIER_ASSIGN_OR_RETURN(PoolState * state, impl_->Pool(pool_id));
  KVTIER_RETURN_IF_ERROR(state->layout.CheckCompatible(layout));
  return PoolAttachment{pool_id, state->layout, state->pool->options().num_blocks,
                        state->layout.bytes_per_block(), state->storage->mapping()};
}

namespace {

// The pools a sequence spans: each exists, none twice, all of one block size (one key
// per block covers them all).
Status CheckSpan(const Worker::Impl& w, std::span<const uint32_t> pool_ids) {
  if (pool_ids.empty()) return InvalidArgumentError("a sequence needs at least one pool");
  for (size_t i = 0; i < pool_ids.size(); ++i) {
    if (pool_ids[i] >= w.pools_.size()) {
      return NotFoundError("pool " + std::to_string(pool_ids[i]) +
                           " does not exist (this worker has " + std::to_string(w.pools_.size()) +
                           ")");
    }
    if (std::find(pool_ids.begin(), pool_ids.begin() + i, pool_ids[i]) != pool_ids.begin() + i)
      return InvalidArgumentError("pool " + std::to_string(pool_ids[i]) + " is listed twice");
    const uint32_t tpb = w.pools_[pool_ids[i]].layout.tokens_per_block();
    const uint32_t first = w.pools_[pool_ids[0]].layout.tokens_per_block();
    if (tpb != first) {
      return InvalidArgumentError("pools " + std::to_string(pool_ids[0]) + " and " +
                                  std::to_string(pool_ids[i]) + " have blocks of " +
                                  std::to_string(first) + " and " + std::to_string(tpb) +
                                  " tokens; one sequence's blocks are of one size");
    }
  }
  return Status::Ok();
}

// The longest prefix every pool serves, as servable[m] of each (BlockPool::ServablePrefixes).
uint32_t CommonPrefix(const Worker::Impl& w, std::span<const uint32_t> pool_ids,
                      const BlockKey& root, std::span<const BlockKey> keys) {
  std::vector<bool> common(keys.size() + 1, true);
  for (const uint32_t id : pool_ids) {
    const std::vector<bool> servable = w.pools_[id].pool->ServablePrefixes(root, keys);
    for (size_t m = 0; m < common.size(); ++m) common[m] = common[m] && servable[m];
  }
  uint32_t longest = 0;
  for (uint32_t m = 0; m < common.size(); ++m) {
    if (common[m]) longest = m;
  }
  return longest;
}

}  // namespace

Result<Allocation> Worker::Allocate(const AllocateRequest& r) {
  Impl& w = *impl_;
  const uint32_t alone[] = {r.pool_id};
  const std::span<const uint32_t> pool_ids = r.pool_ids.empty() ? alone : r.pool_ids;
  KVTIER_RETURN_IF_ERROR(CheckSpan(w, pool_ids));
  if (w.sequences_.contains({r.client, r.sequence}))
    return AlreadyExistsError(Describe(r.client, r.sequence) + " already exists");
  SequenceRequest request{0,        r.root,       r.salt_scope,    r.format_tag, r.block_keys,
                          r.tokens, r.num_tokens, r.reserve_tokens};
  if (pool_ids.size() > 1) {  // one reuse for all, checked in each before any starts
    const uint32_t reused = CommonPrefix(w, pool_ids, r.root, r.block_keys);
    uint32_t partial = UINT32_MAX;
    for (const uint32_t id : pool_ids) {
      partial = std::min(partial, w.pools_[id].pool->PartialReuseTokens(
                                      r.root, r.block_keys, reused, r.tokens, r.format_tag));
    }
    request.reuse_blocks = reused;
    request.max_partial_tokens = partial;
    for (const uint32_t id : pool_ids) {
      request.id = w.next_internal_;
      KVTIER_RETURN_IF_ERROR(w.pools_[id].pool->CanStart(request));
    }
  }
  const auto tokens = static_cast<uint32_t>(r.tokens.empty() ? r.num_tokens : r.tokens.size());
  SequenceRef seq{{}, tokens, tokens, r.salt_scope, r.format_tag};
  Allocation allocation;
  for (const uint32_t id : pool_ids) {
    PoolState& state = w.pools_[id];
    request.id = w.next_internal_;
    Result<SequenceStart> start = state.pool->StartSequence(request);
    if (start.ok()) {
      ++w.next_internal_;
      // Victims are offloaded before the partial copy writes: the copy's destination may be
      // a victim's block, whose bytes must leave intact.
      w.Settle(id, start->evicted);
      if (start->copy.has_value()) {
        Status copied = w.transfer_.CopyTokens(Impl::Transfer(state), *start->copy);
        if (!copied.ok()) {
          (void)state.pool->FreeSequence(request.id);  // started just now
          start = std::move(copied);
        }
      }
    }
    if (!start.ok()) {
      for (const SequencePart& part : seq.parts)
        (void)w.pools_[part.pool_id].pool->FreeSequence(part.internal);  // started just now
      return start.status();
    }
    seq.parts.push_back({id, request.id, start->reused_blocks});
    allocation.reused_blocks = start->reused_blocks;
    allocation.reused_tokens = start->reused_tokens;
    allocation.partial_tokens =
        start->reused_tokens - start->reused_blocks * state.layout.tokens_per_block();
    allocation.tables.push_back({id, std::move(start->block_table)});
  }
  allocation.block_table = allocation.tables.front().block_table;
  w.sequences_.emplace(ClientSequence{r.client, r.sequence}, std::move(seq));
  return allocation;
}

Result<Allocation> Worker::Extend(ClientId client, SequenceId sequence, uint32_t total_tokens) {
  Impl& w = *impl_;
  KVTIER_ASSIGN_OR_RETURN(SequenceRef * seq, w.Find(client, sequence));
  if (total_tokens < seq->tokens) {
    return InvalidArgumentError(Describe(client, sequence) + " has " + std::to_string(seq->tokens) +
                                " tokens; it cannot shrink to " + std::to_string(total_tokens));
  }
  const uint32_t added = total_tokens - seq->tokens;
  for (const SequencePart& part : seq->parts)  // all of them grow, or none
    KVTIER_RETURN_IF_ERROR(w.pools_[part.pool_id].pool->CanExtend(part.internal, added));
  Allocation allocation;
  for (const SequencePart& part : seq->parts) {
    BlockPool& pool = *w.pools_[part.pool_id].pool;
    KVTIER_ASSIGN_OR_RETURN(SequenceGrowth growth, pool.Extend(part.internal, added));
    w.Settle(part.pool_id, growth.evicted);
    KVTIER_ASSIGN_OR_RETURN(std::vector<BlockId> table, pool.BlockTable(part.internal));
    allocation.tables.push_back({part.pool_id, std::move(table)});
  }
  seq->tokens = total_tokens;
  allocation.block_table = allocation.tables.front().block_table;
  return allocation;
}

Status Worker::Free(ClientId client, SequenceId sequence) {
  KVTIER_ASSIGN_OR_RETURN(SequenceRef * seq, impl_->Find(client, sequence));
  for (const SequencePart& part : seq->parts)
    KVTIER_RETURN_IF_ERROR(impl_->pools_[part.pool_id].pool->FreeSequence(part.internal));
  impl_->sequences_.erase({client, sequence});
  return Status::Ok();
}

// Commits the part's blocks; the keys it stored are appended to `stored`.
Status Worker::Impl::CommitPart(const SequencePart& part, std::span<const BlockKey> block_keys,
                                std::span<const uint32_t> tokens,
                                std::span<const BlockRetention> retention,
                                std::vector<BlockKey>& stored) {
  KVTIER_RETURN_IF_ERROR(
      pools_[part.pool_id].pool->Commit(part.internal, block_keys, tokens, retention));
  const size_t before = events_.size();
  Settle(part.pool_id, {});
  for (size_t e = before; e < events_.size(); ++e) {
    if (events_[e].kind == WorkerEvent::Kind::kStored) stored.push_back(events_[e].key);
  }
  return Status::Ok();
}

// The retention of each of the sequence's first `blocks` full blocks.
Result<std::vector<BlockRetention>> Worker::Impl::RetentionOf(
    ClientId client, SequenceId sequence, const SequenceRef& seq, size_t blocks,
    const kvtier::RetentionConfig& retention) const {
  const uint32_t tpb = pools_[seq.parts.front().pool_id].layout.tokens_per_block();
  KVTIER_ASSIGN_OR_RETURN(
      std::vector<BlockRetention> per_block,
      kvtier::ComputeBlockRetention(retention, tpb, seq.prompt_tokens, seq.tokens));
  if (blocks > per_block.size()) {
    return InvalidArgumentError("commit of " + std::to_string(blocks) + " blocks, but " +
                                Describe(client, sequence) + " has " +
                                std::to_string(per_block.size()) + " full blocks");
  }
  per_block.resize(blocks);
  return per_block;
}

Result<uint32_t> Worker::Commit(ClientId client, SequenceId sequence,
                                std::span<const BlockKey> block_keys,
                                std::span<const uint32_t> tokens,
                                const kvtier::RetentionConfig& retention) {
  Impl& w = *impl_;
  KVTIER_ASSIGN_OR_RETURN(SequenceRef * seq, w.Find(client, sequence));
  KVTIER_ASSIGN_OR_RETURN(std::vector<BlockRetention> per_block,
                          w.RetentionOf(client, sequence, *seq, block_keys.size(), retention));
  std::vector<BlockKey> stored;
  for (const SequencePart& part : seq->parts)
    KVTIER_RETURN_IF_ERROR(w.CommitPart(part, block_keys, tokens, per_block, stored));
  std::sort(stored.begin(), stored.end());
  return static_cast<uint32_t>(std::unique(stored.begin(), stored.end()) - stored.begin());
}

Result<SequenceState> Worker::Sequence(ClientId client, SequenceId sequence,
                                       std::optional<uint32_t> pool_id) const {
  KVTIER_ASSIGN_OR_RETURN(auto found, impl_->FindPart(client, sequence, pool_id));
  const auto [seq, part] = found;
  SequenceState state{
      part->pool_id,      {}, impl_->pools_[part->pool_id].layout, seq->format_tag, seq->salt_scope,
      part->filled_blocks};
  for (const SequencePart& p : seq->parts) state.pools.push_back(p.pool_id);
  return state;
}

// Onboard into one part of the sequence: its blocks after those it holds KV for.
Status Worker::Impl::OnboardPart(ClientId client, SequenceId sequence, SequenceRef& seq,
                                 SequencePart& part, std::span<const BlockKey> block_keys,
                                 const kvtier::RetentionConfig& retention, OnboardSource& source,
                                 OnboardResult& result) {
  PoolState& state = pools_[part.pool_id];
  KVTIER_ASSIGN_OR_RETURN(std::vector<BlockId> table, state.pool->BlockTable(part.internal));
  // The blocks to fill, in order, up to the first one out of a limited window.
  std::vector<uint32_t> ids;
  ids.reserve(block_keys.size());  // one allocation, however many blocks
  for (uint32_t b = part.filled_blocks; b < block_keys.size() && table[b] != kNoBlock; ++b)
    ids.push_back(table[b]);
  OnboardResult fetched;
  KVTIER_RETURN_IF_ERROR(transfer_.Onboard(Transfer(state), {seq.format_tag, seq.salt_scope}, ids,
                                           block_keys.subspan(part.filled_blocks), source,
                                           fetched));
  if (fetched.onboarded_blocks > 0) {
    const uint32_t filled = part.filled_blocks + fetched.onboarded_blocks;
    KVTIER_ASSIGN_OR_RETURN(std::vector<BlockRetention> per_block,
                            RetentionOf(client, sequence, seq, filled, retention));
    const size_t before = events_.size();
    std::vector<BlockKey> stored;
    KVTIER_RETURN_IF_ERROR(CommitPart(part, block_keys.first(filled), {}, per_block, stored));
    for (size_t e = before; e < events_.size(); ++e) {
      if (events_[e].kind == WorkerEvent::Kind::kStored) events_[e].onboarded = true;
    }
    part.filled_blocks = filled;
    stats_.onboarded_blocks += fetched.onboarded_blocks;
    stats_.onboarded_bytes += uint64_t{fetched.onboarded_blocks} * state.layout.bytes_per_block();
  }
  result.onboarded_blocks += fetched.onboarded_blocks;
  result.from_host += fetched.from_host;
  result.from_disk += fetched.from_disk;
  result.from_remote += fetched.from_remote;
  return Status::Ok();
}

Result<OnboardResult> Worker::Onboard(ClientId client, SequenceId sequence,
                                      std::span<const BlockKey> block_keys,
                                      const kvtier::RetentionConfig& retention,
                                      OnboardSource* source, std::optional<uint32_t> pool_id) {
  Impl& w = *impl_;
  if (source == nullptr) source = w.options_.onboard;
  KVTIER_ASSIGN_OR_RETURN(auto found, w.FindPart(client, sequence, pool_id));
  SequenceRef& seq = *found.first;
  const uint32_t full_blocks =
      seq.tokens / w.pools_[seq.parts.front().pool_id].layout.tokens_per_block();
  if (block_keys.size() > full_blocks) {
    return InvalidArgumentError("onboard of " + std::to_string(block_keys.size()) +
                                " blocks, but " + Describe(client, sequence) + " has " +
                                std::to_string(full_blocks) + " full blocks");
  }
  OnboardResult result;
  if (source != nullptr) {
    for (SequencePart& part : seq.parts) {
      if (pool_id.has_value() && part.pool_id != *pool_id) continue;
      KVTIER_RETURN_IF_ERROR(
          w.OnboardPart(client, sequence, seq, part, block_keys, retention, *source, result));
    }
  }
  result.cached_blocks = seq.filled_blocks();
  return result;
}

Result<std::optional<PoolHolding>> Worker::HeldBlocks::FindCommitted(uint32_t pool_id,
                                                                     const BlockKey& key) const {
  KVTIER_ASSIGN_OR_RETURN(PoolState * state, impl_->Pool(pool_id));
  return state->pool->Find(key);
}

Result<uint32_t> Worker::LookupLocal(std::span<const uint32_t> pool_ids, const BlockKey& root,
                                     std::span<const BlockKey> keys) const {
  KVTIER_RETURN_IF_ERROR(CheckSpan(*impl_, pool_ids));
  return CommonPrefix(*impl_, pool_ids, root, keys);
}

size_t Worker::DropClient(ClientId client) {
  std::vector<SequenceId> dropped;
  for (const auto& [key, seq] : impl_->sequences_) {
    if (key.client == client) dropped.push_back(key.sequence);
  }
  for (SequenceId sequence : dropped) (void)Free(client, sequence);  // each was found just now
  return dropped.size();
}

void Worker::AdvanceTime() {
  for (PoolState& state : impl_->pools_) state.pool->AdvanceTime();
}

std::vector<WorkerEvent> Worker::TakeEvents() {
  std::vector<WorkerEvent> events;
  events.swap(impl_->events_);
  return events;
}

WorkerStats Worker::Stats() const {
  WorkerStats stats = impl_->stats_;
  impl_->transfer_.AddTo(stats);
  for (const PoolState& state : impl_->pools_) stats.pools.push_back(state.pool->Stats());
  return stats;
}

std::vector<std::pair<uint32_t, PoolHolding>> Worker::Holdings() const {
  std::vector<std::pair<uint32_t, PoolHolding>> holdings;
  for (uint32_t pool_id = 0; pool_id < impl_->pools_.size(); ++pool_id) {
    for (const PoolHolding& h : impl_->pools_[pool_id].pool->Holdings())
      holdings.emplace_back(pool_id, h);
  }
  return holdings;
}

size_t Worker::pool_count() const { return impl_->pools_.size(); }

Result<KvLayout> Worker::PoolLayout(uint32_t pool_id) const {
  KVTIER_ASSIGN_OR_RETURN(PoolState * state, impl_->Pool(pool_id));
  return state->layout;
}

}  // namespace kvtier::worker
