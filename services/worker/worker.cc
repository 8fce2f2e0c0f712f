#include "services/worker/worker.h"

#include <algorithm>
#include <chrono>
#include <unordered_map>

#include "common/vector_growth.h"
#include "services/worker/pool_storage.h"

namespace kvtier::worker {
namespace {

struct PoolState {
  KvLayout layout;
  std::unique_ptr<BlockPool> pool;
  std::unique_ptr<PoolStorage> storage;

  size_t BlockOffset(BlockId block) const { return size_t{block} * layout.bytes_per_block(); }
};

struct SequenceRef {
  uint32_t pool_id;
  SequenceId internal;  // the pool's id: unique across clients
  uint32_t prompt_tokens;
  uint32_t tokens;
  uint32_t filled_blocks;  // leading full blocks known to hold KV (reused or onboarded)
  uint64_t salt_scope;
  uint64_t format_tag;
};

struct ClientSequence {
  ClientId client;
  SequenceId sequence;
  friend bool operator==(const ClientSequence&, const ClientSequence&) = default;
};
struct ClientSequenceHash {
  size_t operator()(const ClientSequence& k) const {
    return k.client * 0x9E3779B97F4A7C15ULL ^ k.sequence;
  }
};

std::string Describe(ClientId client, SequenceId sequence) {
  return "sequence " + std::to_string(sequence) + " of client " + std::to_string(client);
}

}  // namespace

class Worker::Impl {
 public:
  explicit Impl(const WorkerOptions& options) : options_(options) {}

  Result<PoolState*> Pool(uint32_t pool_id) {
    if (pool_id >= pools_.size()) {
      return NotFoundError("pool " + std::to_string(pool_id) + " does not exist (this worker has " +
                           std::to_string(pools_.size()) + ")");
    }
    return &pools_[pool_id];
  }

  Result<SequenceRef*> Find(ClientId client, SequenceId sequence) {
    const auto it = sequences_.find({client, sequence});
    if (it == sequences_.end())
      return NotFoundError(Describe(client, sequence) + " does not exist");
    return &it->second;
  }

  // Offloads the victims worth keeping (their bytes read in batches: one gather each on
  // a GPU), then turns the pool's events into the node's.
  void Settle(uint32_t pool_id, const std::vector<EvictedBlock>& evicted) {
    PoolState& state = pools_[pool_id];
    // Parents first: the pool evicts a chain leaf first (a block's children before it), so
    // the victims go to the tier reversed, and its stored events reach the coordinator
    // parent before child: a chain's events join (JoinsWireEvent) and none waits for its
    // parent (docs/history/benchmarks-2026-11.md#a-chain-is-one-event-2026-11-27-stop-46).
    std::vector<const EvictedBlock*> keep;
    keep.reserve(evicted.size());
    for (auto victim = evicted.rbegin(); victim != evicted.rend(); ++victim) {
      if (victim->offload) keep.push_back(&*victim);
    }
    const size_t per_batch = state.storage->BatchLimit(state.layout.bytes_per_block());
    std::vector<BlockKey> refused;
    for (size_t first = 0; first < keep.size(); first += per_batch) {
      Offload(state, std::span(keep).subspan(first, std::min(per_batch, keep.size() - first)),
              refused);
    }
    const std::vector<PoolEvent> pool_events = state.pool->TakeEvents();
    GrowFor(events_, pool_events.size());  // one allocation at most, however many blocks
    for (const PoolEvent& e : pool_events) {
      WorkerEvent::Kind kind = static_cast<WorkerEvent::Kind>(e.kind);
      if (kind == WorkerEvent::Kind::kOffloaded &&
          std::find(refused.begin(), refused.end(), e.key) != refused.end()) {
        kind = WorkerEvent::Kind::kRemoved;
      }
      WorkerEvent& out =
          events_.emplace_back(WorkerEvent{kind, ++next_event_, pool_id, e.key, e.parent, e.first,
                                           e.priority, e.salt_scope, e.retention});
      if (kind == WorkerEvent::Kind::kStored) {
        const std::span<const uint32_t> tokens = state.pool->TokensOf(e.key);
        out.tokens.assign(tokens.begin(), tokens.end());
      }
    }
  }

  // Fetches a batch of the sequence's blocks (keys[i] into block batch[i]) in order until
  // the tiers lack one, counted into `result`; then lands those fetched in one go (one
  // scatter on a GPU), but for those already in place.
  Status OnboardBatch(PoolState& state, const SequenceRef& seq, std::span<const uint32_t> batch,
                      std::span<const BlockKey> keys, OnboardSource& source,
                      OnboardResult& result) {
    const size_t block_bytes = state.layout.bytes_per_block();
    std::vector<std::span<uint8_t>> views;
    KVTIER_RETURN_IF_ERROR(state.storage->WritableBlocks(batch, block_bytes, &views));
    std::vector<uint32_t> to_land;  // positions in `batch`
    to_land.reserve(batch.size());
    std::vector<OnboardBlock> blocks;
    blocks.reserve(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
      blocks.push_back(
          {keys[i], seq.format_tag, seq.salt_scope, &state.layout, views[i], batch[i]});
    }
    const auto fetch_start = std::chrono::steady_clock::now();
    const std::vector<Result<SourceTier>> tiers = source.FetchBatch(blocks);
    uint32_t fetched = 0;
    for (; fetched < batch.size() && fetched < tiers.size(); ++fetched) {
      const Result<SourceTier>& tier = tiers[fetched];
      if (!tier.ok()) break;
      ++(*tier == SourceTier::kHost   ? result.from_host
         : *tier == SourceTier::kDisk ? result.from_disk
                                      : result.from_remote);
      if (*tier == SourceTier::kRemoteInPlace) {
        ++stats_.landed_in_place;
      } else {
        to_land.push_back(fetched);
      }
    }
    result.onboarded_blocks += fetched;
    const auto write_start = std::chrono::steady_clock::now();
    stats_.onboard_fetch += write_start - fetch_start;
    Status landed = to_land.empty()
                        ? Status::Ok()
                        : state.storage->CommitWrites(batch.first(fetched), block_bytes, to_land);
    stats_.onboard_transfer += std::chrono::steady_clock::now() - write_start;
    if (landed.ok() && !to_land.empty()) {
      std::vector<OnboardBlock> done;
      std::vector<SourceTier> from;
      done.reserve(to_land.size());
      from.reserve(to_land.size());
      for (const uint32_t i : to_land) {
        done.push_back(blocks[i]);
        from.push_back(*tiers[i]);
      }
      source.Landed(done, from);
    }
    return landed;
  }

  // One batch of victims to the offload target, or those it refuses (or all, if their
  // bytes cannot be read) into `refused`.
  void Offload(PoolState& state, std::span<const EvictedBlock* const> victims,
               std::vector<BlockKey>& refused) {
    const size_t block_bytes = state.layout.bytes_per_block();
    std::vector<uint32_t> ids;
    ids.reserve(victims.size());
    for (const EvictedBlock* victim : victims) ids.push_back(victim->block);
    std::vector<std::span<const uint8_t>> views;
    const auto read_start = std::chrono::steady_clock::now();
    const bool readable =
        options_.offload != nullptr && state.storage->ReadBlocks(ids, block_bytes, &views).ok();
    const auto store_start = std::chrono::steady_clock::now();
    stats_.offload_transfer += store_start - read_start;
    std::vector<Status> taken;  // one per victim; none when their bytes could not be read
    if (readable) {
      std::vector<OffloadBlock> blocks;
      blocks.reserve(victims.size());
      for (size_t i = 0; i < victims.size(); ++i) {
        const EvictedBlock& v = *victims[i];
        blocks.push_back({v.key, v.parent, v.first, v.format_tag, v.salt_scope, v.priority,
                          &state.layout, views[i]});
      }
      taken = options_.offload->OffloadBatch(blocks);
    }
    for (size_t i = 0; i < victims.size(); ++i) {
      if (i < taken.size() && taken[i].ok()) {
        ++stats_.offloaded_blocks;
        stats_.offloaded_bytes += block_bytes;
      } else {
        ++stats_.dropped_offloads;
        refused.push_back(victims[i]->key);
      }
    }
    stats_.offload_store += std::chrono::steady_clock::now() - store_start;
  }

  // Copy-on-partial-reuse: the leading tokens of every (layer, K|V, head) run. The runs
  // sit at a fixed pitch in a block ([layer][k|v][kv_head][token][head_dim]), so this is
  // one strided copy (one cudaMemcpy2D on a GPU).
  Status CopyTokens(PoolState& state, const PartialCopy& copy) {
    const KvLayout& layout = state.layout;
    const size_t run_bytes = size_t{copy.tokens} * layout.head_dim() * layout.bytes_per_element();
    const size_t runs = size_t{layout.num_layers()} * 2 * layout.num_kv_heads();
    const auto start = std::chrono::steady_clock::now();
    Status copied =
        state.storage->CopyRuns(state.BlockOffset(copy.destination), state.BlockOffset(copy.source),
                                run_bytes, layout.bytes_per_head_run(), runs);
    stats_.copy_transfer += std::chrono::steady_clock::now() - start;
    return copied;
  }

  WorkerOptions options_;
  std::vector<PoolState> pools_;
  std::unordered_map<ClientSequence, SequenceRef, ClientSequenceHash> sequences_;
  SequenceId next_internal_ = 1;
  std::vector<WorkerEvent> events_;
  uint64_t next_event_ = 0;
  WorkerStats stats_;
};

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
  KVTIER_ASSIGN_OR_RETURN(SequenceStart start,
                          state->pool->StartSequence({internal, r.root, r.salt_scope, r.format_tag,
                                                      r.block_keys, r.tokens, r.num_tokens}));
  ++w.next_internal_;
  // Victims are offloaded before the partial copy writes: the copy's destination may be
  // a victim's block, whose bytes must leave intact.
  w.Settle(r.pool_id, start.evicted);
  if (start.copy.has_value()) {
    if (Status copied = w.CopyTokens(*state, *start.copy); !copied.ok()) {
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
    // In batches the pool's staging holds, until one stops short (the tiers lack a block).
    const size_t per_batch = state.storage->BatchLimit(block_bytes);
    for (size_t first = 0; first < ids.size() && result.onboarded_blocks == first;
         first += per_batch) {
      const std::span<const uint32_t> batch =
          std::span(ids).subspan(first, std::min(per_batch, ids.size() - first));
      KVTIER_RETURN_IF_ERROR(w.OnboardBatch(
          state, *seq, batch, block_keys.subspan(seq->filled_blocks + first), *source, result));
    }
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

Result<std::optional<PoolHolding>> Worker::FindCommitted(uint32_t pool_id,
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

std::span<uint8_t> Worker::PoolBytes(uint32_t pool_id) {
  return impl_->pools_.at(pool_id).storage->host_bytes();
}

namespace {

// The pool's state when `block` is one of its blocks and `bytes` one block's size.
Result<PoolState*> BlockAccess(Worker::Impl& w, const char* what, uint32_t pool_id, BlockId block,
                               size_t bytes) {
  KVTIER_ASSIGN_OR_RETURN(PoolState * state, w.Pool(pool_id));
  if (block >= state->pool->options().num_blocks || bytes != state->layout.bytes_per_block()) {
    return InvalidArgumentError(
        std::string(what) + ": block " + std::to_string(block) + " of pool " +
        std::to_string(pool_id) + " with " + std::to_string(bytes) +
        " bytes (blocks: " + std::to_string(state->pool->options().num_blocks) + " of " +
        std::to_string(state->layout.bytes_per_block()) + " bytes)");
  }
  return state;
}

}  // namespace

Status Worker::ReadBlock(uint32_t pool_id, BlockId block, std::span<uint8_t> out) const {
  KVTIER_ASSIGN_OR_RETURN(PoolState * state,
                          BlockAccess(*impl_, "ReadBlock", pool_id, block, out.size()));
  return state->storage->Read(state->BlockOffset(block), out);
}

Status Worker::ReadBlocks(uint32_t pool_id, std::span<const BlockId> blocks,
                          std::span<const std::span<uint8_t>> outs) const {
  if (blocks.size() != outs.size()) return InvalidArgumentError("ReadBlocks: one buffer per block");
  if (blocks.empty()) return Status::Ok();
  PoolState* state = nullptr;
  for (size_t i = 0; i < blocks.size(); ++i) {
    KVTIER_ASSIGN_OR_RETURN(state,
                            BlockAccess(*impl_, "ReadBlocks", pool_id, blocks[i], outs[i].size()));
  }
  // As a copy of held blocks (on a GPU a copier's gathers, in rounds of its staging):
  // on this loop no one else writes them meanwhile. A gather reads each id once per
  // position, so repeats are harmless (only a scatter must not repeat a block).
  return state->storage->CopyHeld(blocks, state->layout.bytes_per_block(), outs);
}

Result<std::vector<std::span<const uint8_t>>> Worker::HoldBlocks(uint32_t pool_id,
                                                                 std::span<const BlockId> blocks) {
  KVTIER_ASSIGN_OR_RETURN(PoolState * state, impl_->Pool(pool_id));
  KVTIER_RETURN_IF_ERROR(state->pool->HoldBlocks(blocks));
  const std::span<const uint8_t> memory = state->storage->host_bytes();
  std::vector<std::span<const uint8_t>> views(blocks.size());  // a device pool's stay empty
  if (memory.empty()) return views;
  for (size_t i = 0; i < blocks.size(); ++i) {
    views[i] = memory.subspan(state->BlockOffset(blocks[i]), state->layout.bytes_per_block());
  }
  return views;
}

namespace {

// The pool of a call on held blocks (`call`), once each block is one of it. Reads only
// what Create set (the pools, their layouts and storage), never the bookkeeping: safe off
// the loop.
Result<const PoolState*> HeldPool(const std::vector<PoolState>& pools, const char* call,
                                  uint32_t pool_id, std::span<const BlockId> blocks) {
  if (pool_id >= pools.size())
    return InvalidArgumentError(std::string(call) + ": no pool " + std::to_string(pool_id));
  const PoolState& state = pools[pool_id];
  const size_t pool_blocks = state.storage->size() / state.layout.bytes_per_block();
  for (const BlockId block : blocks) {
    if (block >= pool_blocks) {
      return InvalidArgumentError(std::string(call) + ": block " + std::to_string(block) + " of " +
                                  std::to_string(pool_blocks));
    }
  }
  return &state;
}

// HeldPool for CopyHeldBlocks and LandHeldBlocks, once each buffer is one block.
template <typename Buffer>
Result<const PoolState*> HeldAccess(const std::vector<PoolState>& pools, const char* call,
                                    uint32_t pool_id, std::span<const BlockId> blocks,
                                    std::span<const Buffer> buffers) {
  KVTIER_ASSIGN_OR_RETURN(const PoolState* state, HeldPool(pools, call, pool_id, blocks));
  if (blocks.size() != buffers.size())
    return InvalidArgumentError(std::string(call) + ": one buffer per block");
  const size_t block_bytes = state->layout.bytes_per_block();
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (buffers[i].size() != block_bytes) {
      return InvalidArgumentError(std::string(call) + ": block " + std::to_string(blocks[i]) +
                                  " with " + std::to_string(buffers[i].size()) +
                                  " bytes (a block is " + std::to_string(block_bytes) + ")");
    }
  }
  return state;
}

}  // namespace

Status Worker::CopyHeldBlocks(uint32_t pool_id, std::span<const BlockId> blocks,
                              std::span<const std::span<uint8_t>> outs) const {
  KVTIER_ASSIGN_OR_RETURN(const PoolState* state,
                          HeldAccess(impl_->pools_, "CopyHeldBlocks", pool_id, blocks, outs));
  return state->storage->CopyHeld(blocks, state->layout.bytes_per_block(), outs);
}

Result<std::unique_ptr<StagedRead>> Worker::StageHeldBlocks(uint32_t pool_id,
                                                            std::span<const BlockId> blocks) const {
  KVTIER_ASSIGN_OR_RETURN(const PoolState* state,
                          HeldPool(impl_->pools_, "StageHeldBlocks", pool_id, blocks));
  return state->storage->StageHeld(blocks, state->layout.bytes_per_block());
}

Status Worker::LandHeldBlocks(uint32_t pool_id, std::span<const BlockId> blocks,
                              std::span<const std::span<const uint8_t>> ins) const {
  KVTIER_ASSIGN_OR_RETURN(const PoolState* state,
                          HeldAccess(impl_->pools_, "LandHeldBlocks", pool_id, blocks, ins));
  std::vector<BlockId> sorted(blocks.begin(), blocks.end());
  std::ranges::sort(sorted);
  if (std::ranges::adjacent_find(sorted) != sorted.end()) {
    return InvalidArgumentError("LandHeldBlocks: block " +
                                std::to_string(*std::ranges::adjacent_find(sorted)) +
                                " twice in one batch");
  }
  return state->storage->LandHeld(blocks, state->layout.bytes_per_block(), ins);
}

Result<LandingBlocks> Worker::HoldLanding(ClientId client, SequenceId sequence,
                                          uint32_t max_blocks) {
  Impl& w = *impl_;
  KVTIER_ASSIGN_OR_RETURN(SequenceRef * seq, w.Find(client, sequence));
  PoolState& state = w.pools_[seq->pool_id];
  const std::span<uint8_t> memory = state.storage->host_bytes();  // empty: a device pool
  KVTIER_ASSIGN_OR_RETURN(std::vector<BlockId> table, state.pool->BlockTable(seq->internal));
  const uint32_t full_blocks = std::min<uint32_t>(static_cast<uint32_t>(table.size()),
                                                  seq->tokens / state.layout.tokens_per_block());
  LandingBlocks landing{.pool_id = seq->pool_id, .first_block = seq->filled_blocks};
  landing.blocks.reserve(
      std::min<uint32_t>(max_blocks, full_blocks));  // one allocation, however many blocks
  for (uint32_t b = seq->filled_blocks;
       b < full_blocks && table[b] != kNoBlock && landing.blocks.size() < max_blocks; ++b) {
    landing.blocks.push_back(table[b]);
  }
  if (landing.blocks.empty()) {
    return FailedPreconditionError(Describe(client, sequence) +
                                   " has no blank full block after its first " +
                                   std::to_string(seq->filled_blocks) + " in its window");
  }
  KVTIER_RETURN_IF_ERROR(state.pool->HoldForWriting(landing.blocks));
  if (!memory.empty()) {
    landing.views.reserve(landing.blocks.size());
    for (const BlockId b : landing.blocks) {
      landing.views.push_back(memory.subspan(state.BlockOffset(b), state.layout.bytes_per_block()));
    }
    return landing;
  }
  // A device pool's fetch writes into a copier's pinned staging where the landing fits
  // one; otherwise into a buffer of its own, landed by LandHeldBlocks.
  Result<std::unique_ptr<StagedLanding>> staged =
      state.storage->StageLanding(landing.blocks, state.layout.bytes_per_block());
  if (staged.ok()) {
    landing.views = (*staged)->views();
    landing.staged = std::move(*staged);
  }
  return landing;
}

Status Worker::ReleaseBlocks(uint32_t pool_id, std::span<const BlockId> blocks) {
  KVTIER_ASSIGN_OR_RETURN(PoolState * state, impl_->Pool(pool_id));
  return state->pool->ReleaseBlocks(blocks);
}

Status Worker::RememberChecksums(uint32_t pool_id, std::span<const BlockId> blocks,
                                 std::span<const uint64_t> checksums) {
  KVTIER_ASSIGN_OR_RETURN(PoolState * state, impl_->Pool(pool_id));
  return state->pool->RememberChecksums(blocks, checksums);
}

Status Worker::WriteBlock(uint32_t pool_id, BlockId block, std::span<const uint8_t> in) {
  KVTIER_ASSIGN_OR_RETURN(PoolState * state,
                          BlockAccess(*impl_, "WriteBlock", pool_id, block, in.size()));
  return state->storage->Write(state->BlockOffset(block), in);
}

}  // namespace kvtier::worker
