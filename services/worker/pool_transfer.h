// PoolTransfer: the bytes a worker's pools move to and from the tiers below them, and
// within a pool. Victims worth keeping go to the offload target in batches (one read of
// the pool per batch: a gather on a GPU); blocks fetched from an onboard source land in
// batches (one scatter); a partial reuse copies a block's leading tokens (one strided
// copy). Each path is counted and timed into WorkerStats. The worker decides what moves
// (BlockPool's victims, a sequence's blocks); this class moves it.
//
// Thread safety: none; the worker's loop (Worker's).
// Ownership: borrows the offload target, which outlives it; the pools are the caller's.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/block_key.h"
#include "common/kv_layout.h"
#include "common/status.h"
#include "services/worker/pool/block_pool.h"
#include "services/worker/pool_storage.h"
#include "services/worker/worker.h"

namespace kvtier::worker {

// One pool as the transfer sees it: the layout of its blocks and their bytes.
struct TransferPool {
  const KvLayout& layout;
  PoolStorage& storage;
};

// What an onboarded block is committed under besides its key (the sequence's).
struct OnboardScope {
  uint64_t format_tag = 0;
  uint64_t salt_scope = 0;
};

class PoolTransfer {
 public:
  // offload: where victims go (null: every victim is dropped).
  explicit PoolTransfer(OffloadTarget* offload) : offload_(offload) {}

  // Hands the victims marked for offload to the target, parents first (the pool evicts
  // leaves first: reversed, a chain's stored events reach the coordinator parent before
  // child and none waits for its parent), in batches the pool's storage reads at once.
  // Returns the keys of those not kept: refused by the target, or unreadable.
  std::vector<BlockKey> Offload(TransferPool pool, std::span<const EvictedBlock> evicted);

  // Fills `blocks` (keys[i] into blocks[i]) from `source` in batches the pool's staging
  // holds, in order, until the source lacks one; lands each batch in one go but for the
  // blocks already in place (SourceTier::kRemoteInPlace), and tells the source which
  // landed. Counts into `result` (onboarded_blocks: how many were filled, from the first).
  // REQUIRES: keys.size() >= blocks.size().
  [[nodiscard]] Status Onboard(TransferPool pool, OnboardScope scope,
                               std::span<const uint32_t> blocks, std::span<const BlockKey> keys,
                               OnboardSource& source, OnboardResult& result);

  // Copy-on-partial-reuse: the leading `copy.tokens` tokens of every (layer, K|V, head)
  // run of copy.source into copy.destination.
  [[nodiscard]] Status CopyTokens(TransferPool pool, const PartialCopy& copy);

  // The transfer's counts and times (offload, onboard fetch and landing, copies) into
  // `stats`, whose other fields it leaves.
  void AddTo(WorkerStats& stats) const;

 private:
  void OffloadBatch(TransferPool pool, std::span<const EvictedBlock* const> victims,
                    std::vector<BlockKey>& refused);
  Status OnboardBatch(TransferPool pool, OnboardScope scope, std::span<const uint32_t> batch,
                      std::span<const BlockKey> keys, OnboardSource& source, OnboardResult& result);

  OffloadTarget* offload_;
  WorkerStats counts_;  // only the transfer's fields
};

}  // namespace kvtier::worker
