// Worker::Impl and the state it keeps: shared by the worker's source files (worker.cc: pools,
// sequences and events; worker_blocks.cc: block I/O and the held-block calls).
// Internal to the worker library; not part of its API (worker.h is).
//
// Thread safety: Worker's (worker.h): its loop's thread, but for what the held-block
// calls read, which Create sets and nothing changes.
#pragma once

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/vector_growth.h"
#include "services/worker/pool_storage.h"
#include "services/worker/worker.h"

namespace kvtier::worker {

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

inline std::string Describe(ClientId client, SequenceId sequence) {
  return "sequence " + std::to_string(sequence) + " of client " + std::to_string(client);
}

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

}  // namespace kvtier::worker
