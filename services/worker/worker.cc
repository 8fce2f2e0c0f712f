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

Result<Allocation> Worker::Allocate(const AllocateRequest& r) {
  Impl& w = *impl_;
  KVTIER_ASSIGN_OR_RETURN(PoolState * state, w.Pool(r.pool_id));
  if (w.sequences_.contains({r.client, r.sequence}))
    return AlreadyExistsError(Describe(r.client, r.sequence) + " already exists");
  const SequenceId internal = w.next_internal_;
  KVTIER_ASSIGN_OR_RETURN(
      SequenceStart start,
      state->pool->StartSequence({internal, r.root, r.salt_scope, r.format_tag, r.block_keys,
                                  r.tokens, r.num_tokens, r.reserve_tokens}));
  ++w.next_internal_;
  // Victims are offloaded before the partial copy writes: the copy's destination may be
  // a victim's block, whose bytes must leave intact.
  w.Settle(r.pool_id, start.evicted);
  if (start.copy.has_value()) {
    if (Status copied = w.transfer_.CopyTokens(Impl::Transfer(*state), *start.copy); !copied.ok()) {
      (void)state->pool->FreeSequence(internal);  // started just now
      return copied;
    }
  }
  const auto tokens = static_cast<uint32_t>(r.tokens.empty() ? r.num_tokens : r.tokens.size());
  w.sequences_.emplace(ClientSequence{r.client, r.sequence},
                       SequenceRef{r.pool_id, internal, tokens, tokens, start.reused_blocks,
                                   r.salt_scope, r.format_tag});
  const uint32_t partial =
      start.reused_tokens - start.reused_blocks * state->layout.tokens_per_block();
  return Allocation{std::move(start.block_table), start.reused_blocks, start.reused_tokens,
                    partial};
}

Result<Allocation> Worker::Extend(ClientId client, SequenceId sequence, uint32_t total_tokens) {
  Impl& w = *impl_;
  KVTIER_ASSIGN_OR_RETURN(SequenceRef * seq, w.Find(client, sequence));
  if (total_tokens < seq->tokens) {
    return InvalidArgumentError(Describe(client, sequence) + " has " + std::to_string(seq->tokens) +
                                " tokens; it cannot shrink to " + std::to_string(total_tokens));
  }
  BlockPool& pool = *w.pools_[seq->pool_id].pool;
  KVTIER_ASSIGN_OR_RETURN(SequenceGrowth growth,
                          pool.Extend(seq->internal, total_tokens - seq->tokens));
  seq->tokens = total_tokens;
  w.Settle(seq->pool_id, growth.evicted);
  KVTIER_ASSIGN_OR_RETURN(std::vector<BlockId> table, pool.BlockTable(seq->internal));
  return Allocation{std::move(table), 0, 0, 0};
}

Status Worker::Free(ClientId client, SequenceId sequence) {
  KVTIER_ASSIGN_OR_RETURN(SequenceRef * seq, impl_->Find(client, sequence));
  KVTIER_RETURN_IF_ERROR(impl_->pools_[seq->pool_id].pool->FreeSequence(seq->internal));
  impl_->sequences_.erase({client, sequence});
  return Status::Ok();
}

Result<uint32_t> Worker::Commit(ClientId client, SequenceId sequence,
                                std::span<const BlockKey> block_keys,
                                std::span<const uint32_t> tokens,
                                const kvtier::RetentionConfig& retention) {
  Impl& w = *impl_;
  KVTIER_ASSIGN_OR_RETURN(SequenceRef * seq, w.Find(client, sequence));
  PoolState& state = w.pools_[seq->pool_id];
  KVTIER_ASSIGN_OR_RETURN(std::vector<BlockRetention> per_block,
                          kvtier::ComputeBlockRetention(retention, state.layout.tokens_per_block(),
                                                        seq->prompt_tokens, seq->tokens));
  if (block_keys.size() > per_block.size()) {
    return InvalidArgumentError("commit of " + std::to_string(block_keys.size()) + " blocks, but " +
                                Describe(client, sequence) + " has " +
                                std::to_string(per_block.size()) + " full blocks");
  }
  per_block.resize(block_keys.size());
  KVTIER_RETURN_IF_ERROR(state.pool->Commit(seq->internal, block_keys, tokens, per_block));
  const size_t before = w.events_.size();
  w.Settle(seq->pool_id, {});
  return static_cast<uint32_t>(
      std::count_if(w.events_.begin() + static_cast<std::ptrdiff_t>(before), w.events_.end(),
                    [](const WorkerEvent& e) { return e.kind == WorkerEvent::Kind::kStored; }));
}

Result<SequenceState> Worker::Sequence(ClientId client, SequenceId sequence) const {
  KVTIER_ASSIGN_OR_RETURN(SequenceRef * seq, impl_->Find(client, sequence));
  return SequenceState{seq->pool_id, impl_->pools_[seq->pool_id].layout, seq->format_tag,
                       seq->salt_scope, seq->filled_blocks};
}

Result<OnboardResult> Worker::Onboard(ClientId client, SequenceId sequence,
                                      std::span<const BlockKey> block_keys,
                                      const kvtier::RetentionConfig& retention,
                                      OnboardSource* source) {
  Impl& w = *impl_;
  if (source == nullptr) source = w.options_.onboard;
  KVTIER_ASSIGN_OR_RETURN(SequenceRef * seq, w.Find(client, sequence));
  PoolState& state = w.pools_[seq->pool_id];
  const uint32_t full_blocks = seq->tokens / state.layout.tokens_per_block();
  if (block_keys.size() > full_blocks) {
    return InvalidArgumentError("onboard of " + std::to_string(block_keys.size()) +
                                " blocks, but " + Describe(client, sequence) + " has " +
                                std::to_string(full_blocks) + " full blocks");
  }
  KVTIER_ASSIGN_OR_RETURN(std::vector<BlockId> table, state.pool->BlockTable(seq->internal));
  const size_t block_bytes = state.layout.bytes_per_block();
  // The blocks to fill, in order, up to the first one out of a limited window.
  std::vector<uint32_t> ids;
  ids.reserve(block_keys.size());  // one allocation, however many blocks
  for (uint32_t b = seq->filled_blocks; b < block_keys.size() && table[b] != kNoBlock; ++b)
    ids.push_back(table[b]);
  OnboardResult result;
  if (source != nullptr) {
    KVTIER_RETURN_IF_ERROR(
        w.transfer_.Onboard(Impl::Transfer(state), {seq->format_tag, seq->salt_scope}, ids,
                            block_keys.subspan(seq->filled_blocks), *source, result));
  }
  const uint32_t filled = seq->filled_blocks + result.onboarded_blocks;
  if (result.onboarded_blocks > 0) {
    const size_t before = w.events_.size();
    KVTIER_RETURN_IF_ERROR(
        Commit(client, sequence, block_keys.first(filled), {}, retention).status());
    for (size_t e = before; e < w.events_.size(); ++e) {
      if (w.events_[e].kind == WorkerEvent::Kind::kStored) w.events_[e].onboarded = true;
    }
    seq->filled_blocks = filled;
    w.stats_.onboarded_blocks += result.onboarded_blocks;
    w.stats_.onboarded_bytes += uint64_t{result.onboarded_blocks} * block_bytes;
  }
  result.cached_blocks = std::max(filled, seq->filled_blocks);
  return result;
}

Result<std::optional<PoolHolding>> Worker::HeldBlocks::FindCommitted(uint32_t pool_id,
                                                                     const BlockKey& key) const {
  KVTIER_ASSIGN_OR_RETURN(PoolState * state, impl_->Pool(pool_id));
  return state->pool->Find(key);
}

Result<uint32_t> Worker::LookupLocal(uint32_t pool_id, const BlockKey& root,
                                     std::span<const BlockKey> keys) const {
  KVTIER_ASSIGN_OR_RETURN(PoolState * state, impl_->Pool(pool_id));
  return state->pool->LookupPrefix(root, keys);
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
