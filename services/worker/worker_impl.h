// Worker::Impl and the state it keeps: shared by the worker's source files (worker.cc: pools,
// sequences and events; worker_blocks.cc: block I/O and the held-block calls).
// Internal to the worker library; not part of its API (worker.h is).
//
// Thread safety: Worker's (worker.h): its loop's thread, but for what the held-block
// calls read, which Create sets and nothing changes.
#pragma once

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/vector_growth.h"
#include "services/worker/pool_storage.h"
#include "services/worker/pool_transfer.h"
#include "services/worker/worker.h"

namespace kvtier::worker {

struct PoolState {
  KvLayout layout;
  std::unique_ptr<BlockPool> pool;
  std::unique_ptr<PoolStorage> storage;

  size_t BlockOffset(BlockId block) const { return size_t{block} * layout.bytes_per_block(); }
};

// A sequence in one of the pools it spans.
struct SequencePart {
  uint32_t pool_id;
  SequenceId internal;     // the pool's id: unique across clients
  uint32_t filled_blocks;  // leading full blocks known to hold KV (reused or onboarded)
};

struct SequenceRef {
  std::vector<SequencePart> parts;  // one per pool, as allocated
  uint32_t prompt_tokens;
  uint32_t tokens;
  uint64_t salt_scope;
  uint64_t format_tag;

  // The part in `pool_id` (nullopt: the first); null when it spans no such pool.
  SequencePart* Part(std::optional<uint32_t> pool_id) {
    if (!pool_id.has_value()) return &parts.front();
    for (SequencePart& part : parts) {
      if (part.pool_id == *pool_id) return &part;
    }
    return nullptr;
  }
  // Leading full blocks every pool holds KV for.
  uint32_t filled_blocks() const {
    uint32_t filled = UINT32_MAX;
    for (const SequencePart& part : parts) filled = std::min(filled, part.filled_blocks);
    return filled;
  }
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

  // The sequence and its part in `pool_id` (nullopt: its first).
  Result<std::pair<SequenceRef*, SequencePart*>> FindPart(ClientId client, SequenceId sequence,
                                                          std::optional<uint32_t> pool_id) {
    KVTIER_ASSIGN_OR_RETURN(SequenceRef * seq, Find(client, sequence));
    SequencePart* part = seq->Part(pool_id);
    if (part == nullptr) {
      return NotFoundError(Describe(client, sequence) + " has no blocks in pool " +
                           std::to_string(*pool_id));
    }
    return std::pair{seq, part};
  }

  // Offloads the victims worth keeping, then turns the pool's events into the node's.
  void Settle(uint32_t pool_id, const std::vector<EvictedBlock>& evicted) {
    PoolState& state = pools_[pool_id];
    const std::vector<BlockKey> refused = transfer_.Offload(Transfer(state), evicted);
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

  static TransferPool Transfer(PoolState& state) { return {state.layout, *state.storage}; }

  // worker.cc: the parts of a sequence's calls.
  Status CommitPart(const SequencePart& part, std::span<const BlockKey> block_keys,
                    std::span<const uint32_t> tokens, std::span<const BlockRetention> retention,
                    std::vector<BlockKey>& stored);
  Result<std::vector<BlockRetention>> RetentionOf(ClientId client, SequenceId sequence,
                                                  const SequenceRef& seq, size_t blocks,
                                                  const kvtier::RetentionConfig& retention) const;
  Status OnboardPart(ClientId client, SequenceId sequence, SequenceRef& seq, SequencePart& part,
                     std::span<const BlockKey> block_keys, const kvtier::RetentionConfig& retention,
                     OnboardSource& source, OnboardResult& result);

  WorkerOptions options_;
  PoolTransfer transfer_{options_.offload};
  std::vector<PoolState> pools_;
  std::unordered_map<ClientSequence, SequenceRef, ClientSequenceHash> sequences_;
  SequenceId next_internal_ = 1;
  std::vector<WorkerEvent> events_;
  uint64_t next_event_ = 0;
  WorkerStats stats_;  // the sequences' onboarded counts; transfer_ has the rest
};

}  // namespace kvtier::worker
